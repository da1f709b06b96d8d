"""One client's round loop and its answers to peers, with no Ray in it.

The core owns a round (gather, merge, train, laps, evaluate, publish) and talks to the world
only through the transport's interfaces: peers are :class:`ClientHandle` s, the coordinator a
:class:`ControlLink`. The Ray actor (``runtime/client_actor.py``) and the in-process ring
(``in_process.py``) are thin shells that build a core and forward calls to it.
"""

from __future__ import annotations

import logging
import math
import resource
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import torch

from ring_actors.algorithms import Algorithm
from ring_actors.client.answers import PeerAnswers
from ring_actors.client.availability import Availability
from ring_actors.client.checkpoint import Checkpointing
from ring_actors.client.exchange import Exchange, NonFiniteError
from ring_actors.client.isolation_and_noise import ExchangeControl
from ring_actors.client.method_factory import client_seed
from ring_actors.client.resources import ClientData, SlotHolder, Ungated
from ring_actors.client.ring_lap import LapResult, RingLaps, lap_checksum
from ring_actors.client.slot_release import (
    IdleRelease,
    accelerator_memory,
    offloads,
    offloads_parameters,
)
from ring_actors.config import Config
from ring_actors.delivery.event_kinds import EventKind
from ring_actors.delivery.inbox import Inbox
from ring_actors.delivery.journal import JournalEntry
from ring_actors.delivery.outbox import Outbox
from ring_actors.delivery.payload_checks import (
    Bounds,
    derived_limit,
    model_bytes,
    specs,
)
from ring_actors.delivery.payloads import (
    Channel,
    Payload,
    all_finite,
    detach_to_cpu,
)
from ring_actors.delivery.spool import Spool
from ring_actors.delivery.transport import ClientHandle, ControlLink, PeerGone, Pending
from ring_actors.delivery.view import View
from ring_actors.faults.client_side import FaultActions, slow_delay, strike
from ring_actors.heterogeneity.model import Heterogeneity
from ring_actors.timeouts import Timeouts
from topologies import build_topology

log = logging.getLogger(__name__)

KEEP_ROUNDS = 3  # rounds of inbox history and lap results kept: older ones never matter


class ClientCore(Exchange, PeerAnswers, Checkpointing, Availability):
    """Private data and model, a ``receive`` that only enqueues, and a round loop.

    ``receive``, ``serve``, ``ping`` and ``set_view`` are called from the transport's
    threads while ``run`` trains on its own thread, so they answer at once even
    mid-training. Every exchange (pushes, offers and pulls, ring laps, hand-offs) is a
    Payload on one channel or another, sent through one acknowledged outbox.
    ``run_clock`` asks the coordinator how far the run is (``client/availability.py``).
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
        run_clock: Callable[[], Pending[float]] | None = None,
    ) -> None:
        self.id = client_id
        self.config = config
        self.algorithm = algorithm
        self.device = algorithm.device
        self.data = data
        self.control = control
        self.run_clock = run_clock
        offload = offloads(config.clients.offload_idle, self.device)
        self.slots = IdleRelease(
            slots or Ungated(),
            lambda: self.algorithm,
            self.device,
            offload,
            offloads_parameters(offload, config.clients.offload_parameters_mb, algorithm),
        )
        self.faults = faults
        self.checkpoint_path = checkpoint_path
        self.timeouts = Timeouts.from_schedule(config.schedule)
        self.topology = build_topology(config.topology, config.experiment.seed)
        seed = client_seed(config.experiment.seed, client_id)
        self.exchange_control = ExchangeControl(config.schedule.exchange, seed)
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
        self.outbox = Outbox(self.timeouts, self._report_unreachable, self.event)
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
        self.hetero = Heterogeneity(
            config.heterogeneity, config.experiment.seed, config.total_clients
        )
        self.run_started_at = time.monotonic()  # the loop takes the run's clock as it begins
        self.next_period = 0
        self.next_mark_s = config.eval.every_s or math.inf
        self.gather_wait_s = 0.0
        self.slots.release()  # what building the method cached is not kept while waiting

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
        """Continue a run from this client's checkpoint: the round after the saved one.

        The plan's entries strike from that round on, as they would have uninterrupted:
        only the rounds the checkpoint finished are behind it."""
        if self.thread is None:
            self.resumed_after = self.completed
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

    def event(self, kind: EventKind, round_: int, detail: str = "", **measured: float) -> None:
        self.control.report_event(kind, self.id, round_, detail, **measured)

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
            self._take_run_clock()
            self._await_first_view()
            if joining:
                with self.slots.resident():
                    self.algorithm.joining(first_round)
                self._initialise_from_hand_off()
            round_ = first_round
            while round_ < self.config.experiment.rounds and self._time_left() > 0:
                round_ = self._away_if_due(round_)
                self.round = round_
                if not self.run_round(round_):
                    break  # the time budget ran out while it waited
                self.completed = round_
                self.laps.forget_before(round_ - KEEP_ROUNDS)
                self.inbox.forget_before(round_ - KEEP_ROUNDS, Channel.SHARE)
                round_ += 1
            self._rounds_over()
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

    def _await_first_view(self) -> None:
        """Wait (at most a hop's timeout) for the coordinator's view. Its broadcast and the
        call that starts this loop may run in either order on the actor's threads. Without
        the view, a resumed client's first gather would await no in-neighbour and merge
        nothing."""
        if self.current_view.epoch == 0:
            self.inbox.wait(lambda: self.current_view.epoch > 0, self.timeouts.hop_s, self.tick)

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
        with self.slots.resident():
            self.algorithm.init_from(payload.to(self.device))
        self.event(
            EventKind.JOIN_INITIALISED,
            payload.round,
            f"{payload.nbytes} bytes from {payload.sender}",
        )

    def run_round(self, round_: int) -> bool:
        """Gather, merge and train, run the laps, evaluate, publish, and report; False
        when the time budget ran out during the gather (nothing trained)."""
        if round_ > self.resumed_after and self.faults is not None:
            strike(self.config.faults, self.id, round_, self.faults)
        started = time.monotonic()
        bytes_before, hops_before = self.outbox.bytes_dispatched, self.outbox.hops
        slot_wait_before = self.slots.waited_s
        received = self._gather(round_)
        if self._time_left() <= 0:
            return False
        delay = slow_delay(self.config.faults, self.id, round_)
        if delay:
            time.sleep(delay)
        metrics, train_s, train_cpu_s = self._merge_and_train(round_, received)
        slowed_s = self._slow_down(round_, train_s)
        non_finite = sorted(k for k, v in metrics.items() if not _finite(v))
        non_finite += self._run_laps(round_, metrics)
        if non_finite:
            raise NonFiniteError(f"round {round_}: non-finite {', '.join(non_finite)}")
        if self._evaluates(round_):
            self._evaluate(round_, metrics)
        self._publish(round_)
        metrics.update(
            merged=float(len(received)),
            train_s=train_s,
            train_cpu_s=train_cpu_s,
            slot_wait_s=self.slots.waited_s - slot_wait_before,
            round_s=time.monotonic() - started,
            compute_delay_s=slowed_s,
            gather_wait_s=self.gather_wait_s,
            samples=float(len(self.data.train)),
            bytes_sent=float(self.outbox.bytes_dispatched - bytes_before),
            hops=float(self.outbox.hops - hops_before),  # with bytes_sent, outlives a crash
            peak_rss_mb=peak_rss_mb(),
            **accelerator_memory(self.device),
        )
        if delay:
            metrics["slow_delay_s"] = delay
        with self.lock:
            self.journal_entries.append(JournalEntry("round", round_, dict(metrics)))
        if self.checkpoint_path is not None:
            self.save_checkpoint(round_)
        self.control.report_round(self.id, round_, metrics)
        return True

    def _merge_and_train(
        self, round_: int, received: list[Payload]
    ) -> tuple[dict[str, float], float, float]:
        """Merge what was taken and train, holding a compute slot: the method's metrics, and
        the wall and thread CPU seconds it took (below the wall time when work beside the
        slot holders takes the core, or with several torch threads)."""
        with self.slots.hold(round_):
            computing, computing_cpu = time.monotonic(), time.thread_time()
            self.algorithm.begin_round(round_)
            taken = self.exchange_control.taken(received)
            self.algorithm.merge([p.to(self.device) for p in taken])
            metrics = self.algorithm.train_round(self.data.train)
            return metrics, time.monotonic() - computing, time.thread_time() - computing_cpu

    def _slow_down(self, round_: int, train_s: float) -> float:
        """A slower device's extra time, slept outside the slot (never past the budget)."""
        slowed_s = min(self.hetero.compute_delay(self.id, train_s), max(0.0, self._time_left()))
        if slowed_s > 0:
            factor = self.hetero.speed_factor(self.id)
            self.event(
                EventKind.COMPUTE_DELAY, round_, f"speed factor {factor:g}", duration_s=slowed_s
            )
            time.sleep(slowed_s)
        return slowed_s

    def _run_laps(self, round_: int, metrics: dict[str, float]) -> list[str]:
        """Each of the method's laps this round: contribute, apply the one total every
        member gets, and record what lets anyone check it did. The laps whose contribution
        was non-finite (refused at the source: the others' lap goes on)."""
        non_finite = []
        for name in self.exchange_control.laps(self.algorithm.laps(round_)):
            with self.slots.resident():
                made = self.algorithm.contribute(name, round_)
                contribution = {k: v.detach() for k, v in made.items()}  # chunks add there
            if not all_finite(contribution):
                self.event(EventKind.NON_FINITE_CONTRIBUTION, round_, f"lap {name!r}")
                non_finite.append(f"lap {name}")
                contribution = {}
            if contribution:  # what this member put in, for anyone auditing the total
                metrics[f"lap_{name}_contribution"] = lap_checksum(contribution)
            result = self.laps.run(name, round_, contribution)
            if result is not None:
                with self.slots.resident():  # the total leaves the device with the call
                    total = {k: v.to(self.device) for k, v in result.total.items()}
                    self.algorithm.apply_lap(name, round_, total, list(result.contributors))
                    del total  # before the cache is returned as the call ends
                metrics[f"lap_{name}_contributors"] = float(len(result.contributors))
                metrics[f"lap_{name}_checksum"] = lap_checksum(result.total)
        return non_finite

    def _evaluate(self, round_: int, metrics: dict[str, float]) -> None:
        """Local-T and Global-T scores and the method's diagnostics, into ``metrics``."""
        with self.slots.hold(round_):
            for prefix, data in (
                ("local", self.data.local_test),
                ("global", self.data.global_test),
            ):
                scores = self.algorithm.evaluate(data)
                metrics.update({f"{prefix}_{k}": v for k, v in scores.items()})
            diagnostics = self.algorithm.diagnostics(self.data.local_test)
            metrics.update({f"diag_{k}": v for k, v in diagnostics.items()})

    def _on_link(self, payload: Payload, target: int, delay_s: float) -> None:
        """A hop that a slow link holds back, for the run's events."""
        if delay_s > 0:
            detail = f"{payload.channel.value} to {target}, {payload.nbytes} bytes"
            self.event(EventKind.LINK_DELAY, payload.round, detail, duration_s=delay_s)

    # ---- reports ------------------------------------------------------------------------

    def _report_unreachable(self, target: int) -> None:
        self.control.report_unreachable(self.id, target, self.current_view.epoch)


def peak_rss_mb() -> float:
    """This process's peak resident memory: many actors share one host, so growth matters."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10  # bytes there, KiB here


def _shapes(tensors: dict[str, torch.Tensor]) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v.shape) for k, v in tensors.items()}


def _is_init(payload: Payload) -> bool:
    return payload.channel == Channel.INIT


def _finite(value: float) -> bool:
    return value == value and value not in (float("inf"), float("-inf"))
