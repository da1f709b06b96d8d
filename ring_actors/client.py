"""ClientActor: one federated client as a long-lived Ray actor with its own training thread."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

import numpy as np
import ray
import torch
from ray.exceptions import RayActorError

from ring_actors.algorithms import ALGORITHMS, TaskSpec
from ring_actors.config import Config
from ring_actors.data.images import LabelledImages
from ring_actors.data.partition import ClientSplit
from ring_actors.data.sources import DatasetArrays
from ring_actors.faults import slow_delay, strike
from ring_actors.inbox import Inbox
from ring_actors.membership import View
from ring_actors.protocol import Payload, PayloadError, detach_to_cpu

log = logging.getLogger(__name__)

SHARE = "share"  # point-to-point hand-over of the shared state after each round
INIT = "init"  # a predecessor's hand-off to a client that joins the ring


@dataclass(eq=False)
class InFlight:
    """A sent payload kept until its receiver acknowledges it: nothing is dropped on failure."""

    target: int
    payload: Payload
    ref: ray.ObjectRef
    sent_at: float
    reported: bool = False


def pick_device(num_gpus: float) -> torch.device:
    """The GPU Ray assigned to this actor, capped to its fraction; the CPU otherwise."""
    if num_gpus > 0 and ray.get_gpu_ids() and torch.cuda.is_available():
        device = torch.device("cuda", 0)  # Ray sets CUDA_VISIBLE_DEVICES to our GPU
        torch.cuda.set_per_process_memory_fraction(min(1.0, num_gpus), device)
        return device
    return torch.device("cpu")


class ClientActor:
    """Private data and model, a ``receive`` that only enqueues, and a training thread.

    Actor methods are called on Ray's concurrency threads while the round loop runs on its
    own thread, so ``receive``, ``ping`` and ``set_view`` answer at once even mid-training.
    """

    def __init__(
        self,
        client_id: int,
        config: Config,
        dataset: DatasetArrays,
        split: ClientSplit,
        global_test: np.ndarray,
        coordinator: ray.actor.ActorHandle,
    ) -> None:
        self.id = client_id
        self.config = config
        self.coordinator = coordinator
        threads = max(1, int(config.clients.num_cpus))
        torch.set_num_threads(threads)  # many actors share few cores: never oversubscribe
        self.device = pick_device(config.clients.num_gpus)

        def images(x: np.ndarray, y: np.ndarray) -> LabelledImages:
            return LabelledImages.from_arrays(x, y, dataset.mean, dataset.std, self.device)

        self.train = images(dataset.train_x[split.train], dataset.train_y[split.train])
        self.local_test = images(dataset.test_x[split.test], dataset.test_y[split.test])
        self.global_test = images(dataset.test_x[global_test], dataset.test_y[global_test])
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
        # Every client runs the same method: what ours shares is what a valid payload holds,
        # and if it shares nothing, nobody sends, so a client never waits.
        self.expected = {k: tuple(v.shape) for k, v in self.algorithm.shared_state().items()}
        self.shares = bool(self.expected)

        self.inbox = Inbox()
        self.lock = threading.Lock()
        self.view = View(epoch=0, successors=(), predecessors=(), members=())
        self.handles: dict[int, ray.actor.ActorHandle] = {}
        self.in_flight: list[InFlight] = []
        self.last_payload: Payload | None = None
        self.round = -1  # the round in progress
        self.completed = -1  # the last round finished
        self.bytes_sent = 0
        self.hops = 0
        self.rejected = 0
        self.thread: threading.Thread | None = None

    # ---- actor API (called by peers and the coordinator) -------------------------------

    def describe(self) -> dict:
        """Placement facts, returned once the actor is constructed."""
        return {
            "client": self.id,
            "node_id": ray.get_runtime_context().get_node_id(),
            "device": str(self.device),
            "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
            "torch_threads": torch.get_num_threads(),
            "num_train": len(self.train),
            "num_local_test": len(self.local_test),
        }

    def receive(self, payload: Payload) -> bool:
        """Validate and enqueue; never blocks on training.

        True acknowledges the delivery (a duplicate re-send is acknowledged but not queued
        twice); False means rejected: malformed, non-finite, or from a bypassed member.
        """
        try:
            if not isinstance(payload, Payload):
                raise PayloadError(f"expected a Payload, got {type(payload).__name__}")
            payload.validate(self.expected)
        except PayloadError as err:
            log.warning("client %d rejected a payload: %s", self.id, err)
            self.rejected += 1
            self.coordinator.report_event.remote("payload_rejected", self.id, self.round, str(err))
            return False
        with self.lock:
            stale = payload.epoch < self.view.epoch and payload.sender not in self.view.members
        if stale:  # from a member that was bypassed: it must not touch the ring
            self.coordinator.report_event.remote(
                "stale_payload_dropped", self.id, self.round, f"from {payload.sender}"
            )
            return False
        self.inbox.put(payload)
        return True

    def set_view(self, view: View, handles: dict[int, ray.actor.ActorHandle]) -> None:
        """Adopt a newer membership view; re-send to new successors what they may lack.

        A new successor gets the latest payload (it may have gone to a member that then
        died) and every payload the old successors never acknowledged.
        """
        with self.lock:
            if view.epoch <= self.view.epoch:
                return  # idempotent: an old or repeated broadcast changes nothing
            old = set(self.view.successors)
            self.view, self.handles = view, dict(handles)
            unacked = [f.payload for f in self.in_flight if f.target not in view.successors]
            self.in_flight = [f for f in self.in_flight if f.target in view.successors]
            resend = unacked + ([self.last_payload] if self.last_payload else [])
            for target in view.successors:
                if target in old:
                    continue
                for payload in {id(p): p for p in resend}.values():
                    self._dispatch(target, payload)

    def stats(self) -> dict:
        """Counters for tests and debugging."""
        return {
            "round": self.round,
            "completed": self.completed,
            "epoch": self.view.epoch,
            "inbox": len(self.inbox),
            "rejected": self.rejected,
            "hops": self.hops,
            "bytes_sent": self.bytes_sent,
        }

    def start(self, first_round: int = 0, joining: bool = False) -> None:
        """Start the round loop on its own thread and return at once.

        A joining client first waits for its predecessor's hand-off and initialises from it.
        """
        if self.thread is None:
            self.thread = threading.Thread(
                target=self._run,
                args=(first_round, joining),
                name=f"client-{self.id}",
                daemon=True,
            )
            self.thread.start()

    def hand_off(self, joiner: int, handle: ray.actor.ActorHandle) -> None:
        """Give a newcomer what the method says it starts from: our latest shared state."""
        with self.lock:
            latest = self.last_payload
        tensors = latest.tensors if latest else detach_to_cpu(self.algorithm.shared_state())
        if tensors:
            round_ = latest.round if latest else self.completed
            handle.receive.remote(
                Payload(
                    self.id,
                    max(round_, 0),
                    self.view.epoch,
                    seq=-1,
                    tensors=tensors,
                    num_samples=len(self.train),
                    kind=INIT,
                )
            )

    def ping(self) -> int:
        """Heartbeat: the last round this client finished."""
        return self.completed

    # ---- round loop ---------------------------------------------------------------------

    def _run(self, first_round: int, joining: bool) -> None:
        try:
            if joining:
                self._initialise_from_hand_off()
            for round_ in range(first_round, self.config.experiment.rounds):
                self.round = round_
                self._run_round(round_)
                self.completed = round_
            lost = self._drain()
            self.coordinator.report_done.remote(self.id, lost, self.hops, self.bytes_sent)
        except Exception as err:  # reported as a value: one client's bug never stalls the ring
            log.exception("client %d failed", self.id)
            self.coordinator.report_event.remote("client_error", self.id, self.round, repr(err))
            raise

    def _initialise_from_hand_off(self) -> None:
        """Run ``init_from`` on the hand-off; a method that shares nothing needs none."""
        if not self.shares:
            return
        timeout = self.config.schedule.hop_timeout_s
        if not self.inbox.wait(lambda: self.inbox.count(INIT) > 0, timeout, self._poll_in_flight):
            self.coordinator.report_event.remote("join_without_hand_off", self.id, -1, "")
            return
        (payload,) = self.inbox.take(INIT)[-1:]
        self.algorithm.init_from(payload.to(self.device))
        self.coordinator.report_event.remote(
            "join_initialised", self.id, payload.round, f"from {payload.sender}"
        )

    def _run_round(self, round_: int) -> None:
        strike(self.config.faults, self.id, round_)
        started = time.monotonic()
        received = self._gather(round_)
        if received:
            self.algorithm.merge([p.to(self.device) for p in received])
        delay = slow_delay(self.config.faults, self.id, round_)
        if delay:
            time.sleep(delay)
        metrics = self.algorithm.train_round(self.train)
        train_s = time.monotonic() - started
        every, last = self.config.eval.every, self.config.experiment.rounds - 1
        if round_ % every == every - 1 or round_ == last:
            metrics.update(
                {f"local_{k}": v for k, v in self.algorithm.evaluate(self.local_test).items()}
            )
            metrics.update(
                {f"global_{k}": v for k, v in self.algorithm.evaluate(self.global_test).items()}
            )
        shared = self.algorithm.shared_state()
        if shared:
            payload = Payload(
                sender=self.id,
                round=round_,
                epoch=self.view.epoch,
                seq=round_,
                tensors=detach_to_cpu(shared),
                num_samples=len(self.train),
                kind=SHARE,
            )
            self._send(payload)
            metrics["bytes_sent"] = float(payload.nbytes)
        metrics.update(merged=float(len(received)), train_s=train_s, samples=float(len(self.train)))
        self.coordinator.report_round.remote(self.id, round_, metrics)

    def _gather(self, round_: int) -> list[Payload]:
        """What to merge this round, after waiting as the schedule mode requires."""
        schedule = self.config.schedule
        # sync: round r merges what the in-neighbours sent at the end of round r - 1.
        # async: never run more than max_staleness rounds ahead of an in-neighbour.
        lag = 0 if schedule.mode == "sync" else schedule.max_staleness
        max_round = round_ - 1 if schedule.mode == "sync" else None

        def ready() -> bool:
            newest = self.inbox.newest
            return all(newest.get(p, -1) >= round_ - 1 - lag for p in self.view.predecessors)

        must_wait = round_ > 0 and self.shares and self.view.predecessors
        if must_wait and not self.inbox.wait(ready, schedule.hop_timeout_s, self._poll_in_flight):
            self.coordinator.report_event.remote(
                "wait_timeout", self.id, round_, f"waited {schedule.hop_timeout_s}s"
            )
        return self.inbox.take(SHARE, max_round)

    # ---- sending: acknowledged, retried on a new view, never lost ---------------------

    def _send(self, payload: Payload) -> None:
        with self.lock:
            self.last_payload = payload
            for target in self.view.successors:
                self._dispatch(target, payload)
        self._poll_in_flight()

    def _dispatch(self, target: int, payload: Payload) -> None:
        """Fire-and-forget ``receive`` on ``target``; caller holds the lock."""
        ref = self.handles[target].receive.remote(payload)
        self.in_flight.append(InFlight(target, payload, ref, time.monotonic()))

    def _poll_in_flight(self) -> None:
        """Settle acknowledged sends; report silent or dead successors to the coordinator."""
        with self.lock:
            flights = list(self.in_flight)
        if not flights:
            return
        ready, _ = ray.wait([f.ref for f in flights], num_returns=len(flights), timeout=0)
        ready_ids = {r.hex() for r in ready}
        now = time.monotonic()
        for flight in flights:
            if flight.ref.hex() in ready_ids:
                try:
                    accepted = ray.get(flight.ref)
                except RayActorError:
                    self._suspect(flight)
                    continue
                with self.lock:
                    if flight in self.in_flight:
                        self.in_flight.remove(flight)
                if accepted:
                    self.hops += 1
                    self.bytes_sent += flight.payload.nbytes
            elif now - flight.sent_at > self.config.schedule.hop_timeout_s:
                self._suspect(flight)

    def _suspect(self, flight: InFlight) -> None:
        if not flight.reported:
            flight.reported = True
            self.coordinator.report_unreachable.remote(self.id, flight.target, self.view.epoch)

    def _drain(self) -> int:
        """Wait for the last sends to be acknowledged; what never is counts as lost."""
        deadline = time.monotonic() + 3 * self.config.schedule.hop_timeout_s
        while time.monotonic() < deadline:
            self._poll_in_flight()
            with self.lock:
                if not self.in_flight:
                    return 0
            time.sleep(0.02)
        with self.lock:
            return len({id(f.payload) for f in self.in_flight})
