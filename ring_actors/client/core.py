"""One client's round loop and its answers to peers, with no Ray in it.

The core owns a round (gather, merge, train, laps, evaluate, publish) and talks to the world
only through the transport's interfaces: peers are :class:`ClientHandle` s, the coordinator a
:class:`ControlLink`. The Ray actor (``client.py``) and the in-process ring (``in_process.py``)
are thin shells that build a core and forward calls to it.
"""

from __future__ import annotations

import logging
import resource
import sys
import threading
import time
import traceback
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch

from ring_actors.algorithms import Algorithm
from ring_actors.client.checkpoint import load_client_state
from ring_actors.client.faults import FaultActions, slow_delay, strike
from ring_actors.client.ring_lap import LapResult, RingLaps, is_lap
from ring_actors.config import Config
from ring_actors.coordinator.membership import View
from ring_actors.data.images import LabelledImages
from ring_actors.delivery.events import EventKind
from ring_actors.delivery.inbox import Inbox
from ring_actors.delivery.outbox import Outbox
from ring_actors.delivery.payload_checks import (
    Bounds,
    check_tensors,
    derived_limit,
    expected_for,
    model_bytes,
    specs,
)
from ring_actors.delivery.payloads import (
    Channel,
    JournalEntry,
    Payload,
    PayloadError,
    all_finite,
    detach_to_cpu,
)
from ring_actors.delivery.spool import Spool
from ring_actors.delivery.transport import ClientHandle, ControlLink, PeerGone, wait_all
from ring_actors.durable import write_atomic
from ring_actors.timeouts import Timeouts
from topologies import build_topology

log = logging.getLogger(__name__)

KEEP_PUBLISHED = 3  # rounds of published state kept for peers that pull late
KEEP_ROUNDS = 3  # rounds of inbox history and lap results kept: older ones never matter


class NonFiniteError(ArithmeticError):
    """Training made the model or its losses non-finite."""


@dataclass(frozen=True)
class ClientData:
    """A client's private train and test splits, and the Global-T set every client shares."""

    train: LabelledImages
    local_test: LabelledImages
    global_test: LabelledImages


class SlotHolder(Protocol):
    """Compute slots (see ``slots``): ``with hold(round_):`` around training and evaluation."""

    waited_s: float

    def hold(self, round_: int) -> AbstractContextManager[None]: ...


class Ungated:
    """No slot limit: every client computes when it is ready."""

    waited_s = 0.0

    @contextmanager
    def hold(self, round_: int) -> Iterator[None]:
        yield


class ClientCore:
    """Private data and model, a ``receive`` that only enqueues, and a round loop.

    ``receive``, ``serve``, ``ping`` and ``set_view`` are called from the transport's
    threads while ``run`` trains on its own thread, so they answer at once even
    mid-training. Every exchange (pushes, offers and pulls, ring laps, hand-offs) is a
    Payload on one channel or another, sent through one acknowledged outbox.
    """

    def __init__(
        self,
        client_id: int,
        config: Config,
        algorithm: Algorithm,
        data: ClientData,
        control: ControlLink,
        slots: SlotHolder | None = None,
        faults: FaultActions | None = None,
        checkpoint_path: Path | None = None,
    ) -> None:
        self.id = client_id
        self.config = config
        self.algorithm = algorithm
        self.device = algorithm.device
        self.data = data
        self.control = control
        self.slots = slots or Ungated()
        self.faults = faults
        self.checkpoint_path = checkpoint_path
        self.timeouts = Timeouts.from_schedule(config.schedule)
        self.topology = build_topology(config.topology, config.experiment.seed)
        # Every client runs the same method, so what ours publishes is what a valid payload
        # holds; if it publishes nothing, nobody sends and nobody waits.
        offer = algorithm.offer()
        self.offers = offer is not None
        self.shared_shapes = _shapes(algorithm.shared_state())
        self.expected = _shapes(offer) if offer is not None else self.shared_shapes
        self.hand_off_tensors = detach_to_cpu(algorithm.hand_off_state())
        # What each channel must hold, by name, shape and dtype; the size limit, unless set,
        # is what this method can send at most.
        shared = algorithm.shared_state()
        self.share_specs = specs(offer if offer is not None else shared)
        self.shared_specs = specs(shared)
        self.init_specs = specs(self.hand_off_tensors)
        self.max_payload_bytes = config.schedule.max_payload_bytes or derived_limit(
            model_bytes(algorithm, shared, self.hand_off_tensors), config.total_clients
        )
        self.bounds = Bounds(config.experiment.rounds, epoch_lead=3 * config.total_clients + 8)

        self.inbox = Inbox()
        self.lock = threading.Lock()
        self.view = View(epoch=0, members=(), first_rounds=())
        self.handles: dict[int, ClientHandle] = {}
        self.outbox = Outbox(self.timeouts, self._report_unreachable, self._report_failure)
        self.laps = RingLaps(self, self.timeouts)
        self.published: dict[int, dict[str, torch.Tensor]] = {}
        self.last_push: Payload | None = None
        self.pushed_to: set[int] = set()
        self.first_round = 0
        self.round = -1  # the round in progress
        self.completed = -1  # the last round finished
        self.rejected = 0
        self.thread: threading.Thread | None = None
        self.journal_entries: list[JournalEntry] = []  # what the coordinator was told
        self.resumed_after = -1  # a restarted client does not re-enter its fatal round's fault
        # Re-sent to a new out-neighbour, which may need the one before the newest.
        self.recent_pushes: list[Payload] = []
        # Pushes taken since the last checkpoint, on disk before they are acknowledged; the
        # lock keeps a push from being dropped between entering the inbox and the spool.
        self.spool = Spool(checkpoint_path.with_suffix(".inbox")) if checkpoint_path else None
        self.spool_lock = threading.Lock()

    # ---- called by peers and the coordinator --------------------------------------------

    def receive(self, payload: Payload) -> bool:
        """Validate and enqueue (or, for a ring lap, pass on); never blocks on training.

        True acknowledges the delivery (a duplicate re-send is acknowledged but not queued
        twice); False means rejected: malformed, non-finite, or from a bypassed member.
        """
        try:
            if not isinstance(payload, Payload):
                raise PayloadError(f"expected a Payload, got {type(payload).__name__}")
            payload.validate(None, self.max_payload_bytes)
            self.bounds.check(payload, self.current_view.epoch)
            if payload.channel == Channel.PULLED:
                raise PayloadError("pulled state comes only as the answer to a pull")
            expected = expected_for(payload.channel, self.share_specs, self.init_specs)
            if expected is not None:
                if not payload.tensors:
                    raise PayloadError(f"{payload.channel.value} payload with no tensors")
                check_tensors(payload, expected)
            return self._accept(payload)
        except PayloadError as err:
            return self._reject(str(err))
        except Exception as err:  # noqa: BLE001 - one bad payload never harms the receiver
            log.exception("client %d could not take a payload", self.id)
            return self._reject(f"could not be taken: {err!r}")

    def _accept(self, payload: Payload) -> bool:
        with self.lock:
            view = self.view
        if payload.sender not in view.members and payload.epoch < view.epoch:
            self.event(EventKind.STALE_PAYLOAD_DROPPED, self.round, f"from {payload.sender}")
            return False  # from a member that was bypassed: it must not touch the ring
        if is_lap(payload):
            ahead = payload.round >= self.first_round and payload.round > self.completed
            if self.laps.on_receive(payload, runs_round=ahead):
                return True
        with self.spool_lock:
            # Saved before it is queued: a push the spool cannot keep is refused whole (the
            # sender sends it again), never merged unsaved nor acknowledged and forgotten.
            if self.spool and payload.channel == Channel.SHARE and not self.inbox.has(payload):
                self.spool.keep(payload)
            self.inbox.put(payload)
        return True

    def serve(self, round_: int, keys: tuple[str, ...]) -> Payload | None:
        """The pulled part of what this client published after ``round_`` (or later)."""
        with self.lock:
            rounds = sorted(r for r in self.published if r >= round_)
            if not rounds:
                return None
            state = self.published[rounds[0]]
            epoch = self.view.epoch
        payload = Payload(
            self.id,
            rounds[0],
            epoch,
            seq=rounds[0],
            tensors={k: state[k] for k in keys if k in state},
            num_samples=len(self.data.train),
            channel=Channel.PULLED,
        )
        self.outbox.count_served(payload)
        return payload

    def lap_result(self, name: str, round_: int) -> LapResult | None:
        """A finished lap's total, for a client whose result token was lost."""
        return self.laps.result(name, round_)

    def set_view(self, view: View, handles: Mapping[int, ClientHandle]) -> None:
        """Adopt a newer membership view and re-route what the old one left undelivered.

        Sends to members that are gone go to their replacements (a lap token to the new
        successor), and every current out-neighbour gets the newest published payload.
        """
        with self.lock:
            if view.epoch <= self.view.epoch:
                return  # idempotent: an old or repeated broadcast changes nothing
            self.view, self.handles = view, {**self.handles, **handles}
            self.outbox.set_handles(handles)
        pushes: list[Payload] = []
        for flight in self.outbox.reroute(set(view.members)):
            if is_lap(flight.payload):
                successor = view.successor(self.id)
                if successor is not None and successor not in flight.payload.lap.visited:
                    self.outbox.send(successor, flight.payload)
            elif flight.target in view.members:  # restarted: the same member, sent again
                self.outbox.send(flight.target, flight.payload)
            elif flight.payload.channel == Channel.SHARE:
                pushes.append(flight.payload)
        with self.lock:
            last = self.last_push
            fresh: set[int] = set()
            if last is not None:
                pushes.extend([*self.recent_pushes, last])
                targets = set(self.topology.out_neighbours(view.members, self.id, last.round))
                fresh = targets - self.pushed_to
                self.pushed_to |= fresh
        for target in sorted(fresh):
            for payload in {id(p): p for p in pushes}.values():
                self.outbox.send(target, payload)

    def hand_off(self, joiner: int, handle: ClientHandle) -> None:
        """Give a newcomer what the method says it starts from (snapshotted each round)."""
        with self.lock:
            tensors = self.hand_off_tensors
            epoch = self.view.epoch
        if tensors:
            self.outbox.set_handles({joiner: handle})
            payload = Payload(
                self.id,
                max(self.completed, 0),
                epoch,
                seq=-1,
                tensors=tensors,
                num_samples=len(self.data.train),
                channel=Channel.INIT,
            )
            self.outbox.send(joiner, payload)

    def ping(self) -> int:
        """Heartbeat: the last round this client finished."""
        return self.completed

    def journal(self) -> list[dict]:
        """Every report sent to the coordinator, for a restarted coordinator to replay."""
        with self.lock:
            return [entry.to_dict() for entry in self.journal_entries]

    def stats(self) -> dict:
        """Counters for tests and debugging."""
        return {
            "round": self.round,
            "completed": self.completed,
            "epoch": self.view.epoch,
            "inbox": len(self.inbox),
            "rejected": self.rejected,
            "hops": self.outbox.hops,
            "bytes_sent": self.outbox.bytes_acked,
        }

    def start(self, first_round: int = 0, joining: bool = False) -> None:
        """Start the round loop on its own thread and return at once.

        A joining client first waits for its predecessor's hand-off and initialises from it.
        """
        if self.thread is None:
            if self.completed >= 0:  # restored from a checkpoint: skip the fault that killed us
                self.resumed_after = first_round
            self.first_round = first_round
            self.completed = first_round - 1
            self._start_thread(first_round, joining)

    def resume(self) -> None:
        """Continue a run from this client's checkpoint: the round after the saved one."""
        if self.thread is None:
            self.resumed_after = self.completed + 1
            self._start_thread(self.completed + 1, joining=False)

    def _start_thread(self, first_round: int, joining: bool) -> None:
        self.thread = threading.Thread(
            target=self.run, args=(first_round, joining), name=f"client-{self.id}", daemon=True
        )
        self.thread.start()

    # ---- the lap host interface ---------------------------------------------------------

    @property
    def current_view(self) -> View:
        with self.lock:
            return self.view

    def send(self, target: int, payload: Payload) -> None:
        self.outbox.send(target, payload)

    def tick(self) -> None:
        self.outbox.poll()

    def event(self, kind: EventKind, round_: int, detail: str = "") -> None:
        self.control.report_event(kind, self.id, round_, detail)

    def fetch_lap_result(self, leader: int, name: str, round_: int) -> LapResult | None:
        with self.lock:
            handle = self.handles.get(leader)
        if handle is None:
            return None
        try:
            return handle.lap_result(name, round_).result(self.timeouts.lap_fetch_s)
        except (PeerGone, TimeoutError):
            return None

    # ---- round loop ---------------------------------------------------------------------

    def run(self, first_round: int, joining: bool) -> None:
        """Every round from ``first_round`` on; a failure is reported, never swallowed."""
        try:
            if joining:
                self.algorithm.joining(first_round)
                self._initialise_from_hand_off()
            for round_ in range(first_round, self.config.experiment.rounds):
                self.round = round_
                self.run_round(round_)
                self.completed = round_
                self.laps.forget_before(round_ - KEEP_ROUNDS)
                self.inbox.forget_before(round_ - KEEP_ROUNDS)
            lost = self.outbox.drain(self.timeouts.drain_s)
            if lost:
                self.event(
                    EventKind.PAYLOADS_LOST, self.round, "; ".join(self.outbox.unacknowledged())
                )
            done = {
                "lost": lost,
                "hops": self.outbox.hops,
                "bytes_sent": self.outbox.bytes_acked,
            }
            with self.lock:
                self.journal_entries.append(JournalEntry("done", self.round, dict(done)))
            self.control.report_done(self.id, lost, self.outbox.hops, self.outbox.bytes_acked)
        except Exception as err:  # reported with its traceback: the coordinator decides
            log.exception("client %d failed in round %d", self.id, self.round)
            text = "".join(traceback.format_exception(type(err), err, err.__traceback__))
            self.control.report_failed(self.id, self.round, text)

    def _initialise_from_hand_off(self) -> None:
        """Run ``init_from`` on the hand-off; a method that hands nothing over needs none,
        and a newcomer configured to start fresh waits for none."""
        if self.config.clients.join_start == "fresh":
            self.event(EventKind.JOIN_FRESH, -1)
            return
        if not self.hand_off_tensors:
            return
        arrived = self.inbox.wait(
            lambda: bool(self.inbox.peek(_is_init)), self.timeouts.hand_off_s, self.tick
        )
        if not arrived:
            self.event(EventKind.JOIN_WITHOUT_HAND_OFF, -1)
            return
        payload = self.inbox.pop(_is_init)[-1]
        self.algorithm.init_from(payload.to(self.device))
        self.event(
            EventKind.JOIN_INITIALISED,
            payload.round,
            f"{payload.nbytes} bytes from {payload.sender}",
        )

    def run_round(self, round_: int) -> None:
        """Gather, merge and train, run the laps, evaluate, publish, and report."""
        if round_ > self.resumed_after and self.faults is not None:
            strike(self.config.faults, self.id, round_, self.faults)
        started = time.monotonic()
        bytes_before = self.outbox.bytes_dispatched
        slot_wait_before = self.slots.waited_s
        received = self._gather(round_)
        delay = slow_delay(self.config.faults, self.id, round_)
        if delay:
            time.sleep(delay)
        with self.slots.hold(round_):
            computing = time.monotonic()
            self.algorithm.merge([p.to(self.device) for p in received])
            metrics = self.algorithm.train_round(self.data.train)
            train_s = time.monotonic() - computing
        non_finite = sorted(k for k, v in metrics.items() if not _finite(v))
        for name in self.algorithm.laps(round_):
            contribution = detach_to_cpu(self.algorithm.contribute(name, round_))
            if not all_finite(contribution):  # refused at the source: the others' lap goes on
                self.event(EventKind.NON_FINITE_CONTRIBUTION, round_, f"lap {name!r}")
                non_finite.append(f"lap {name}")
                contribution = {}
            if contribution:  # what this member put in, for anyone auditing the total
                metrics[f"lap_{name}_contribution"] = lap_checksum(contribution)
            result = self.laps.run(name, round_, contribution)
            if result is not None:
                total = {k: v.to(self.device) for k, v in result.total.items()}
                self.algorithm.apply_lap(name, round_, total, list(result.contributors))
                # Every member gets the same total: these let anyone check it did.
                metrics[f"lap_{name}_contributors"] = float(len(result.contributors))
                metrics[f"lap_{name}_checksum"] = lap_checksum(result.total)
        if non_finite:
            raise NonFiniteError(f"round {round_}: non-finite {', '.join(non_finite)}")
        every, last = self.config.eval.every, self.config.experiment.rounds - 1
        if round_ % every == every - 1 or round_ == last:
            with self.slots.hold(round_):
                for prefix, data in (
                    ("local", self.data.local_test),
                    ("global", self.data.global_test),
                ):
                    scores = self.algorithm.evaluate(data)
                    metrics.update({f"{prefix}_{k}": v for k, v in scores.items()})
        self._publish(round_)
        metrics.update(
            merged=float(len(received)),
            train_s=train_s,
            slot_wait_s=self.slots.waited_s - slot_wait_before,
            round_s=time.monotonic() - started,
            samples=float(len(self.data.train)),
            bytes_sent=float(self.outbox.bytes_dispatched - bytes_before),
            peak_rss_mb=peak_rss_mb(),
        )
        if delay:
            metrics["slow_delay_s"] = delay
        with self.lock:
            self.journal_entries.append(JournalEntry("round", round_, dict(metrics)))
        if self.checkpoint_path is not None:
            self.save_checkpoint(round_)
        self.control.report_round(self.id, round_, metrics)

    def _gather(self, round_: int) -> list[Payload]:
        """What to merge this round, after waiting as the schedule mode requires.

        sync: round r merges what the in-neighbours published after round r - 1; async:
        never run more than ``max_staleness`` rounds ahead of an in-neighbour. With offers,
        the method then decides what to pull, and only that crosses the network.
        """
        schedule = self.config.schedule
        if round_ == self.first_round or not self.expected:
            return []
        lag = 0 if schedule.mode == "sync" else schedule.max_staleness
        max_round = round_ - 1 if schedule.mode == "sync" else None

        def senders() -> list[int]:
            view = self.current_view
            active = set(view.active(round_ - 1))
            return [
                p
                for p in self.topology.in_neighbours(view.members, self.id, round_ - 1)
                if p in active
            ]

        def ready() -> bool:
            if schedule.mode == "sync":  # that very round: a later one may overtake it
                return all(self.inbox.arrived(Channel.SHARE, p, round_ - 1) for p in senders())
            return all(self.inbox.newest(Channel.SHARE, p) >= round_ - 1 - lag for p in senders())

        if not self.inbox.wait(ready, self.timeouts.gather_s, self.tick):
            self.event(EventKind.WAIT_TIMEOUT, round_, f"waited {self.timeouts.gather_s:g}s")
        arrived = self.inbox.take(Channel.SHARE, max_round)
        if not self.offers:
            return arrived
        plan = self.algorithm.decide([p.to(self.device) for p in arrived])
        return self._pull({s: keys for s, keys in plan.items() if keys}, arrived)

    def _pull(self, plan: dict[int, tuple[str, ...]], offers: list[Payload]) -> list[Payload]:
        """Fetch the decided keys from each peer; a peer that cannot answer is reported."""
        round_of = {p.sender: p.round for p in offers}
        with self.lock:
            handles = dict(self.handles)
        calls = {s: handles[s].serve(round_of[s], keys) for s, keys in plan.items()}
        pulled = []
        for sender, answer in wait_all(calls, self.timeouts.pull_s).items():
            try:
                if isinstance(answer, BaseException):
                    raise answer
                if answer is None:
                    raise PayloadError("nothing published for that round")
                self._check_pulled(answer, sender, round_of[sender], plan[sender])
                pulled.append(answer)
            except PayloadError as err:
                self._reject(str(err))
            except Exception as err:  # noqa: BLE001 - gone, silent or failing: report it
                self.event(EventKind.PULL_FAILED, self.round, f"from {sender}: {err!r}")
                self._report_unreachable(sender)
        return pulled

    def _check_pulled(
        self, answer: object, sender: int, round_: int, keys: tuple[str, ...]
    ) -> None:
        """A pull's answer: a valid PULLED payload of ``sender``'s, of ``round_`` or a later
        round of this run, holding exactly ``keys`` as this method holds them."""
        if not isinstance(answer, Payload):
            raise PayloadError(f"pull from {sender}: expected a Payload, got {type(answer)}")
        answer.validate(None, self.max_payload_bytes)
        self.bounds.check(answer, self.current_view.epoch)
        if answer.channel != Channel.PULLED or answer.sender != sender:
            raise PayloadError(
                f"pull from {sender}: answered with a {answer.channel} payload of {answer.sender}"
            )
        if answer.round < round_:
            raise PayloadError(f"pull from {sender}: round {answer.round}, asked {round_}")
        check_tensors(answer, self.shared_specs, keys)

    def _publish(self, round_: int) -> None:
        """Snapshot what a joiner gets, then push the shared state or the offer."""
        shared = self.algorithm.shared_state()
        with self.lock:
            self.hand_off_tensors = detach_to_cpu(self.algorithm.hand_off_state())
        if self.offers:
            with self.lock:
                self.published[round_] = detach_to_cpu(shared)
                for old in [r for r in self.published if r <= round_ - KEEP_PUBLISHED]:
                    del self.published[old]
            tensors = detach_to_cpu(self.algorithm.offer() or {})
        else:
            tensors = detach_to_cpu(shared)
        if not tensors:
            return
        if not all_finite(tensors):
            raise NonFiniteError(f"round {round_}: the shared state is not finite")
        with self.lock:
            view = self.view
            if self.last_push is not None:
                self.recent_pushes = [self.last_push]
            payload = Payload(
                sender=self.id,
                round=round_,
                epoch=view.epoch,
                seq=round_,
                tensors=tensors,
                num_samples=len(self.data.train),
                channel=Channel.SHARE,
            )
            targets = self.topology.out_neighbours(view.members, self.id, round_)
            self.last_push, self.pushed_to = payload, set(targets)
        for target in targets:
            self.outbox.send(target, payload)
        self.tick()

    # ---- checkpoints --------------------------------------------------------------------

    def save_checkpoint(self, round_: int) -> None:
        """The private state after ``round_``, for a restarted client to resume from."""
        path = self.checkpoint_path
        assert path is not None
        # A receiver keeps every push it acknowledged (its spool): a restart needs only those
        # still unacknowledged, and the newest (its acknowledgement may be on the way).
        with self.outbox.lock:
            waiting = [
                f.payload for f in self.outbox.in_flight if f.payload.channel == Channel.SHARE
            ]
        with self.lock:
            last = self.last_push
        older = {p.key: p for p in waiting if p is not last}  # one per push, not per target
        pushes = [*older.values(), *([last] if last else [])]  # restored as ``last_push``
        state = {
            "round": round_,
            "first_round": self.first_round,
            "algorithm": self.algorithm,
            "journal": self.journal(),
            "pushes": pushes,
            "torch_rng": torch.get_rng_state(),
        }
        write_atomic(path, lambda file: torch.save(state, file))
        if self.spool is not None:  # what this checkpoint merged is no longer needed
            with self.spool_lock:
                self.spool.retain(p.key for p in self.inbox.peek(_is_share))

    def load_checkpoint(self) -> int | None:
        """Restore the last checkpoint and re-send the reports a crash may have cut off;
        its round, or None when there is none (a restart on a new node)."""
        path = self.checkpoint_path
        if path is None or not path.exists():
            return None
        saved = load_client_state(path, self.device)
        self.algorithm = saved["algorithm"]
        self.completed = saved["round"]
        self.first_round = saved["first_round"]
        self.journal_entries = [JournalEntry.from_dict(e) for e in saved["journal"]]
        *self.recent_pushes, self.last_push = saved["pushes"] or [None]
        torch.set_rng_state(saved["torch_rng"])
        assert self.spool is not None
        for payload in self.spool.load(self.device):  # acknowledged before the crash
            self.inbox.put(payload)
        for entry in self.journal_entries:
            if entry.kind == "round":
                self.control.report_round(self.id, entry.round, entry.metrics)
        return saved["round"]

    # ---- reports ------------------------------------------------------------------------

    def _reject(self, reason: str) -> bool:
        log.warning("client %d rejected a payload: %s", self.id, reason)
        with self.lock:  # receives run on several Ray threads at once
            self.rejected += 1
        self.event(EventKind.PAYLOAD_REJECTED, self.round, reason)
        return False

    def _report_unreachable(self, target: int) -> None:
        self.control.report_unreachable(self.id, target, self.current_view.epoch)

    def _report_failure(self, target: int, error: str) -> None:
        self.event(EventKind.DELIVERY_FAILED, self.round, f"client {target} raised {error}")


def peak_rss_mb() -> float:
    """This process's peak resident memory: many actors share one host, so growth matters."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10  # bytes there, KiB here


def lap_checksum(total: dict[str, torch.Tensor]) -> float:
    """One number that differs when two members applied different totals; linear, so a
    total's is the sum of its contributions'."""
    return float(sum(float(t.double().sum()) for t in total.values()))


def _shapes(tensors: dict[str, torch.Tensor]) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v.shape) for k, v in tensors.items()}


def _is_share(payload: Payload) -> bool:
    return payload.channel == Channel.SHARE


def _is_init(payload: Payload) -> bool:
    return payload.channel == Channel.INIT


def _finite(value: float) -> bool:
    return value == value and value not in (float("inf"), float("-inf"))
