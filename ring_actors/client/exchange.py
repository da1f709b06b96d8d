"""What a client sends and takes each round: the gather that waits as the schedule mode
says, the pulls an offer leads to, and the push of what it publishes."""

from __future__ import annotations

import time

from ring_actors.client.state import ClientState
from ring_actors.delivery.event_kinds import EventKind
from ring_actors.delivery.payload_checks import check_tensors
from ring_actors.delivery.payloads import (
    Channel,
    Payload,
    PayloadError,
    all_finite,
    detach_to_cpu,
)
from ring_actors.delivery.transport import wait_all

KEEP_PUBLISHED = 3  # rounds of published state kept for peers that pull late


class NonFiniteError(ArithmeticError):
    """Training made the model or its losses non-finite."""


class Exchange(ClientState):
    """A round's exchange; mixed into :class:`~ring_actors.client.core.ClientCore`."""

    def _gather(self, round_: int) -> list[Payload]:
        """What to merge this round, after waiting as the schedule mode requires.

        sync: round r merges what the in-neighbours published after round r - 1; async:
        never run more than ``max_staleness`` rounds ahead of an in-neighbour. Nobody waits
        for a member the view marks a straggler: what it pushed is merged once it is here.
        With offers, the method then decides what to pull, and only that crosses the network.
        """
        schedule = self.config.schedule
        self.gather_wait_s = 0.0
        if round_ == self.first_round or not self.expected or self.exchange_control.isolated:
            return []
        lag = 0 if schedule.mode == "sync" else schedule.max_staleness
        max_round = round_ - 1 if schedule.mode == "sync" else None

        def senders() -> list[int]:
            view = self.current_view
            awaited = set(view.active(round_ - 1)) - set(view.stragglers)
            peers = self.topology.in_neighbours(view.members, self.id, round_ - 1, view.speed_of())
            return [p for p in peers if p in awaited]

        def ready() -> bool:
            if schedule.mode == "sync":  # that very round: a later one may overtake it
                return all(self.inbox.arrived(Channel.SHARE, p, round_ - 1) for p in senders())
            return all(self.inbox.newest(Channel.SHARE, p) >= round_ - 1 - lag for p in senders())

        wait_s = min(self.timeouts.round_wait_s, self._time_left())
        waiting = time.monotonic()
        if not self.inbox.wait(ready, wait_s, self.tick) and wait_s == self.timeouts.gather_s:
            self.event(EventKind.WAIT_TIMEOUT, round_, f"waited {self.timeouts.gather_s:g}s")
        self.gather_wait_s = time.monotonic() - waiting
        arrived = self.inbox.take(Channel.SHARE, max_round)
        if not self.offers:
            return arrived
        with self.slots.resident():
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
        with self.slots.resident():
            shared = detach_to_cpu(self.algorithm.shared_state())
            hand_off = detach_to_cpu(self.algorithm.hand_off_state())
            offer = detach_to_cpu(self.algorithm.offer() or {}) if self.offers else None
        with self.lock:
            self.hand_off_tensors = hand_off
        if offer is not None:
            with self.lock:
                self.published[round_] = shared
                for old in [r for r in self.published if r <= round_ - KEEP_PUBLISHED]:
                    del self.published[old]
            tensors = offer
        else:
            tensors = shared
        if not tensors or self.exchange_control.isolated:
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
            targets = self.topology.out_neighbours(view.members, self.id, round_, view.speed_of())
            self.last_push, self.pushed_to = payload, set(targets)
        for target in targets:
            self.outbox.send(target, payload)
        self.tick()
