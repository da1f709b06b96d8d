"""ClientActor: one federated client as a long-lived Ray actor with its own training thread."""

from __future__ import annotations

import logging
import os
import resource
import sys
import threading
import time
from pathlib import Path

import numpy as np
import ray
import torch

from ring_actors.algorithms import ALGORITHMS, TaskSpec
from ring_actors.config import Config
from ring_actors.data.images import LabelledImages
from ring_actors.data.partition import ClientSplit
from ring_actors.data.sources import DatasetArrays
from ring_actors.faults import slow_delay, strike
from ring_actors.inbox import Inbox
from ring_actors.membership import View
from ring_actors.outbox import Outbox
from ring_actors.protocol import Payload, PayloadError, detach_to_cpu
from ring_actors.ring_lap import LapResult, RingLaps, is_lap
from ring_actors.slots import Slots, node_resources, pool_name, slot_limit, threads_per_slot
from topologies import build_topology

log = logging.getLogger(__name__)

SHARE = "share"  # what a client publishes after each round: its shared state, or its offer
INIT = "init"  # a predecessor's hand-off to a client that joins the ring
KEEP_PUBLISHED = 3  # rounds of published state kept for peers that pull late


def pick_device(num_gpus: float) -> torch.device:
    """The GPU Ray assigned to this actor, capped to its fraction; the CPU otherwise."""
    if num_gpus > 0 and ray.get_gpu_ids() and torch.cuda.is_available():
        device = torch.device("cuda", 0)  # Ray sets CUDA_VISIBLE_DEVICES to our GPU
        torch.cuda.set_per_process_memory_fraction(min(1.0, num_gpus), device)
        return device
    return torch.device("cpu")


class ClientActor:
    """Private data and model, a ``receive`` that only enqueues, and a training thread.

    Actor methods run on Ray's concurrency threads while the round loop runs on its own
    thread, so ``receive``, ``serve``, ``ping`` and ``set_view`` answer at once even
    mid-training. Every exchange (pushes, offers and pulls, ring laps, hand-offs) is a
    Payload on one channel or another, sent through one acknowledged outbox.
    """

    def __init__(
        self,
        client_id: int,
        config: Config,
        dataset: DatasetArrays,
        split: ClientSplit,
        global_test: tuple[np.ndarray, np.ndarray],
        coordinator: ray.actor.ActorHandle,
        state_dir: str,
        run_key: str,
    ) -> None:
        self.id = client_id
        self.config = config
        self.coordinator = coordinator
        context = ray.get_runtime_context()
        clients = config.clients
        node = node_resources(context.get_node_id())
        limit = slot_limit(clients.concurrency, clients.slots_per_gpu, clients.num_gpus, node)
        torch.set_num_threads(threads_per_slot(limit, node))  # only slot holders compute
        self.slots = Slots(pool_name(run_key, context.get_node_id()), client_id)
        self.device = pick_device(config.clients.num_gpus)

        def images(x: np.ndarray, y: np.ndarray) -> LabelledImages:
            return LabelledImages.from_arrays(x, y, dataset.mean, dataset.std, self.device)

        self.train = images(dataset.train_x[split.train], dataset.train_y[split.train])
        self.local_test = images(dataset.test_x[split.test], dataset.test_y[split.test])
        # Shared by every client of the node (read-only from the object store) on the CPU.
        self.global_test = images(*global_test)
        seed = config.experiment.seed
        task = TaskSpec(
            num_classes=dataset.num_classes,
            input_shape=dataset.input_shape,
            local_epochs=config.clients.local_epochs,
            batch_size=config.clients.batch_size,
            device=self.device,
            seed=seed * 100_003 + client_id,
            shared_seed=seed,
        )
        self.algorithm = ALGORITHMS[config.algorithm.name](config.algorithm.options, task)
        self.topology = build_topology(config.topology, seed)
        # Every client runs the same method, so what ours publishes is what a valid payload
        # holds; if it publishes nothing, nobody sends and nobody waits.
        offer = self.algorithm.offer()
        self.offers = offer is not None
        self.shared_shapes = _shapes(self.algorithm.shared_state())
        self.expected = _shapes(offer) if offer is not None else self.shared_shapes
        self.hand_off_tensors = detach_to_cpu(self.algorithm.hand_off_state())

        self.inbox = Inbox()
        self.lock = threading.Lock()
        self.view = View(epoch=0, members=(), first_rounds=())
        self.handles: dict[int, ray.actor.ActorHandle] = {}
        timeout = config.schedule.hop_timeout_s
        self.outbox = Outbox(timeout, self._report_unreachable)
        self.laps = RingLaps(self, timeout)
        self.published: dict[int, dict[str, torch.Tensor]] = {}
        self.last_push: Payload | None = None
        self.pushed_to: set[int] = set()
        self.first_round = 0
        self.round = -1  # the round in progress
        self.completed = -1  # the last round finished
        self.rejected = 0
        self.thread: threading.Thread | None = None
        self.journal_entries: list[tuple] = []  # what we told the coordinator, for its recovery
        self.checkpoint_path = Path(state_dir) / f"client-{client_id}.pt"
        self.resumed_after = -1  # a restarted client does not re-enter its fatal round's fault
        if context.was_current_actor_reconstructed:
            restored = self._load_checkpoint()
            node = context.get_node_id()
            coordinator.rejoin.remote(client_id, context.current_actor, node, restored)

    # ---- actor API (called by peers and the coordinator) -------------------------------

    def describe(self) -> dict:
        """Placement facts, returned once the actor is constructed."""
        return {
            "client": self.id,
            "pid": os.getpid(),
            "node_id": ray.get_runtime_context().get_node_id(),
            "device": str(self.device),
            "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
            "torch_threads": torch.get_num_threads(),
            "num_train": len(self.train),
            "num_local_test": len(self.local_test),
        }

    def receive(self, payload: Payload) -> bool:
        """Validate and enqueue (or, for a ring lap, pass on); never blocks on training.

        True acknowledges the delivery (a duplicate re-send is acknowledged but not queued
        twice); False means rejected: malformed, non-finite, or from a bypassed member.
        """
        try:
            if not isinstance(payload, Payload):
                raise PayloadError(f"expected a Payload, got {type(payload).__name__}")
            payload.validate(self.expected if payload.kind == SHARE else None)
        except PayloadError as err:
            log.warning("client %d rejected a payload: %s", self.id, err)
            self.rejected += 1
            self.event("payload_rejected", self.round, str(err))
            return False
        with self.lock:
            stale = payload.epoch < self.view.epoch and payload.sender not in self.view.members
        if stale:  # from a member that was bypassed: it must not touch the ring
            self.event("stale_payload_dropped", self.round, f"from {payload.sender}")
            return False
        if is_lap(payload):
            ahead = payload.round >= self.first_round and payload.round > self.completed
            if self.laps.on_receive(payload, runs_round=ahead):
                return True
        self.inbox.put(payload)
        return True

    def serve(self, round_: int, keys: tuple[str, ...]) -> Payload | None:
        """The pulled part of what this client published after ``round_`` (or later)."""
        with self.lock:
            rounds = sorted(r for r in self.published if r >= round_)
            if not rounds:
                return None
            state = self.published[rounds[0]]
        payload = Payload(
            self.id,
            rounds[0],
            self.view.epoch,
            seq=rounds[0],
            tensors={k: state[k] for k in keys if k in state},
            num_samples=len(self.train),
            kind="pulled",
        )
        self.outbox.count_served(payload)
        return payload

    def lap_result(self, name: str, round_: int) -> LapResult | None:
        """A finished lap's total, for a client whose result token was lost."""
        return self.laps.result(name, round_)

    def set_view(self, view: View, handles: dict[int, ray.actor.ActorHandle]) -> None:
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
                if successor is not None and successor not in flight.payload.meta["visited"]:
                    self.outbox.send(successor, flight.payload)
            elif flight.payload.kind == SHARE:
                pushes.append(flight.payload)
        with self.lock:
            last = self.last_push
            if last is not None:
                pushes.append(last)
                targets = set(self.topology.out_neighbours(view.members, self.id, last.round))
                fresh = targets - self.pushed_to
                self.pushed_to |= fresh
            else:
                fresh = set()
        for target in sorted(fresh):
            for payload in {id(p): p for p in pushes}.values():
                self.outbox.send(target, payload)

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
            self.thread = threading.Thread(
                target=self._run, args=(first_round, joining), name=f"client-{self.id}", daemon=True
            )
            self.thread.start()

    def hand_off(self, joiner: int, handle: ray.actor.ActorHandle) -> None:
        """Give a newcomer what the method says it starts from (snapshotted each round)."""
        with self.lock:
            tensors = self.hand_off_tensors
        if tensors:
            self.outbox.set_handles({joiner: handle})
            self.outbox.send(
                joiner,
                Payload(
                    self.id,
                    max(self.completed, 0),
                    self.view.epoch,
                    seq=-1,
                    tensors=tensors,
                    num_samples=len(self.train),
                    kind=INIT,
                ),
            )

    def ping(self) -> int:
        """Heartbeat: the last round this client finished."""
        return self.completed

    def journal(self) -> list[tuple]:
        """Every report sent to the coordinator, for a restarted coordinator to replay."""
        with self.lock:
            return list(self.journal_entries)

    # ---- the lap host interface ---------------------------------------------------------

    @property
    def current_view(self) -> View:
        with self.lock:
            return self.view

    def send(self, target: int, payload: Payload) -> None:
        self.outbox.send(target, payload)

    def tick(self) -> None:
        self.outbox.poll()

    def event(self, kind: str, round_: int, detail: str = "") -> None:
        self.coordinator.report_event.remote(kind, self.id, round_, detail)

    def fetch_lap_result(self, leader: int, name: str, round_: int) -> LapResult | None:
        try:
            ref = self.handles[leader].lap_result.remote(name, round_)
            return ray.get(ref, timeout=min(5.0, self.config.schedule.hop_timeout_s))
        except (ray.exceptions.RayError, KeyError):
            return None

    # ---- round loop ---------------------------------------------------------------------

    def _run(self, first_round: int, joining: bool) -> None:
        try:
            if joining:
                self._initialise_from_hand_off()
            for round_ in range(first_round, self.config.experiment.rounds):
                self.round = round_
                self._run_round(round_)
                self.completed = round_
                self.laps.forget_before(round_ - 2)
            lost = self.outbox.drain(3 * self.config.schedule.hop_timeout_s)
            done = (lost, self.outbox.hops, self.outbox.bytes_acked)
            with self.lock:
                self.journal_entries.append(("done", *done))
            self.coordinator.report_done.remote(self.id, *done)
        except Exception as err:  # reported as a value: one client's bug never stalls the ring
            log.exception("client %d failed", self.id)
            self.event("client_error", self.round, repr(err))
            raise

    def _initialise_from_hand_off(self) -> None:
        """Run ``init_from`` on the hand-off; a method that hands nothing over needs none."""
        if not self.hand_off_tensors:
            return
        timeout = self.config.schedule.hop_timeout_s
        if not self.inbox.wait(lambda: self.inbox.count(INIT) > 0, timeout, self.tick):
            self.event("join_without_hand_off", -1)
            return
        (payload,) = self.inbox.take(INIT)[-1:]
        self.algorithm.init_from(payload.to(self.device))
        self.event(
            "join_initialised", payload.round, f"{payload.nbytes} bytes from {payload.sender}"
        )

    def _run_round(self, round_: int) -> None:
        if round_ > self.resumed_after:
            strike(self.config.faults, self.id, round_)
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
            metrics = self.algorithm.train_round(self.train)
            train_s = time.monotonic() - computing
        for name in self.algorithm.laps(round_):
            contribution = detach_to_cpu(self.algorithm.contribute(name, round_))
            result = self.laps.run(name, round_, contribution)
            if result is not None:
                total = {k: v.to(self.device) for k, v in result.total.items()}
                self.algorithm.apply_lap(name, round_, total, list(result.contributors))
        every, last = self.config.eval.every, self.config.experiment.rounds - 1
        if round_ % every == every - 1 or round_ == last:
            with self.slots.hold(round_):
                for prefix, data in (("local", self.local_test), ("global", self.global_test)):
                    scores = self.algorithm.evaluate(data)
                    metrics.update({f"{prefix}_{k}": v for k, v in scores.items()})
        self._publish(round_)
        metrics.update(
            merged=float(len(received)),
            train_s=train_s,
            slot_wait_s=self.slots.waited_s - slot_wait_before,
            round_s=time.monotonic() - started,
            samples=float(len(self.train)),
            bytes_sent=float(self.outbox.bytes_dispatched - bytes_before),
            peak_rss_mb=peak_rss_mb(),
        )
        if delay:
            metrics["slow_delay_s"] = delay
        with self.lock:
            self.journal_entries.append(("round", round_, metrics))
        if self.config.clients.max_restarts > 0:
            self._save_checkpoint(round_)
        self.coordinator.report_round.remote(self.id, round_, metrics)

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
            return all(self.inbox.newest(SHARE, p) >= round_ - 1 - lag for p in senders())

        if not self.inbox.wait(ready, schedule.hop_timeout_s, self.tick):
            self.event("wait_timeout", round_, f"waited {schedule.hop_timeout_s}s")
        arrived = self.inbox.take(SHARE, max_round)
        if not self.offers:
            return arrived
        plan = self.algorithm.decide([p.to(self.device) for p in arrived])
        return self._pull({s: keys for s, keys in plan.items() if keys}, arrived)

    def _pull(self, plan: dict[int, tuple[str, ...]], offers: list[Payload]) -> list[Payload]:
        """Fetch the decided keys from each peer; a peer that cannot answer is reported."""
        round_of = {p.sender: p.round for p in offers}
        refs = {s: self.handles[s].serve.remote(round_of[s], keys) for s, keys in plan.items()}
        timeout = self.config.schedule.hop_timeout_s
        ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout)
        done = {r.hex() for r in ready}
        pulled = []
        for sender, ref in refs.items():
            try:
                if ref.hex() not in done:
                    raise TimeoutError(f"no answer in {timeout}s")
                payload = ray.get(ref)
                if payload is None:
                    raise PayloadError("nothing published for that round")
                payload.validate({k: self.shared_shapes[k] for k in plan[sender]})
                pulled.append(payload)
            except (ray.exceptions.RayError, TimeoutError) as err:
                self.event("pull_failed", self.round, f"from {sender}: {err!r}")
                self._report_unreachable(sender)
            except PayloadError as err:
                self.rejected += 1
                self.event("payload_rejected", self.round, str(err))
        return pulled

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
        payload = Payload(
            sender=self.id,
            round=round_,
            epoch=self.current_view.epoch,
            seq=round_,
            tensors=tensors,
            num_samples=len(self.train),
            kind=SHARE,
        )
        with self.lock:
            view = self.view
            targets = self.topology.out_neighbours(view.members, self.id, round_)
            self.last_push, self.pushed_to = payload, set(targets)
        for target in targets:
            self.outbox.send(target, payload)
        self.tick()

    def _save_checkpoint(self, round_: int) -> None:
        """The private state after ``round_``, for Ray to restart this client from."""
        self.checkpoint_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.checkpoint_path.with_suffix(".tmp")
        with self.lock:
            journal = list(self.journal_entries)
        torch.save({"round": round_, "algorithm": self.algorithm, "journal": journal}, tmp)
        os.replace(tmp, self.checkpoint_path)

    def _load_checkpoint(self) -> int | None:
        """Restore the last checkpoint; its round, or None when there is none (a new node)."""
        if not self.checkpoint_path.exists():
            return None
        saved = torch.load(self.checkpoint_path, map_location=self.device, weights_only=False)
        self.algorithm = saved["algorithm"]
        self.completed = saved["round"]
        self.journal_entries = saved["journal"]
        for _, round_, metrics in self.journal_entries:  # a report the crash cut off
            self.coordinator.report_round.remote(self.id, round_, metrics)
        return saved["round"]

    def _report_unreachable(self, target: int) -> None:
        self.coordinator.report_unreachable.remote(self.id, target, self.current_view.epoch)


def peak_rss_mb() -> float:
    """This process's peak resident memory: many actors share one host, so growth matters."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10  # bytes there, KiB here


def _shapes(tensors: dict[str, torch.Tensor]) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v.shape) for k, v in tensors.items()}
