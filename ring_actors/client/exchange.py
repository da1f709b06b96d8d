"""What a client sends and takes each round: the gather that waits as the schedule mode
says, the pulls an offer leads to, the push of what it publishes, and a joiner's start from
its predecessor's hand-off."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol

import torch

from ring_actors.algorithms import Algorithm
from ring_actors.client.isolation_and_noise import ExchangeControl
from ring_actors.client.slot_release import IdleRelease
from ring_actors.client.state import Events, Membership, PayloadSpecs, Progress, Published
from ring_actors.config import Config
from ring_actors.delivery.event_kinds import EventKind
from ring_actors.delivery.inbox import Inbox
from ring_actors.delivery.outbox import Outbox
from ring_actors.delivery.payload_checks import check_tensors
from ring_actors.delivery.payloads import (
    Channel,
    Payload,
    PayloadError,
    all_finite,
    cpu_snapshots,
    detach_to_cpu,
)
from ring_actors.delivery.transport import wait_all
from ring_actors.timeouts import Timeouts
from topologies import Topology

KEEP_PUBLISHED = 3  # rounds of published state kept for peers that pull late


class NonFiniteError(ArithmeticError):
    """Training made the model or its losses non-finite."""


class ExchangeHost(Events, Protocol):
    """What the exchange asks of its client: the method now (a restore replaces it), the
    budget left, and where a bad pull or a silent peer is reported."""

    algorithm: Algorithm

    def time_left(self) -> float: ...

    def reject(self, reason: str) -> bool: ...

    def report_unreachable(self, target: int) -> None: ...


@dataclass(eq=False)
class Exchange:
    """A client's side of each round's exchange."""

    id: int
    config: Config
    specs: PayloadSpecs
    progress: Progress
    membership: Membership
    published: Published
    inbox: Inbox
    outbox: Outbox
    topology: Topology
    control: ExchangeControl  # ``schedule.exchange``: what is taken of peers
    slots: IdleRelease
    num_samples: int
    timeouts: Timeouts
    host: ExchangeHost
    gather_wait_s: float = field(default=0.0, init=False)  # the last gather's wait

    @property
    def device(self) -> torch.device:
        return self.slots.device

    def await_first_view(self) -> None:
        """Wait (at most a hop's timeout) for the coordinator's view. Its broadcast and the
        call that starts the loop may run in either order on the actor's threads. Without
        the view, a resumed client's first gather would await no in-neighbour and merge
        nothing."""
        if self.membership.current.epoch == 0:
            self.inbox.wait(
                lambda: self.membership.current.epoch > 0, self.timeouts.hop_s, self.outbox.poll
            )

    def initialise_from_hand_off(self, donor: int | None) -> None:
        """Run ``init_from`` on ``donor``'s hand-off; a method that hands nothing over needs
        none, and a newcomer configured to start fresh waits for none. The donor hands over
        once it ends the round before this client's first, so the wait covers its rounds; it
        ends early when the donor leaves the ring, as nothing will come then."""
        if self.config.clients.join_start == "fresh":
            self.host.event(EventKind.JOIN_FRESH, -1)
            return
        if not self.published.hand_off:
            return

        def donor_left() -> bool:
            members = self.membership.current.members
            return self.id in members and donor not in members  # a view since the join

        arrived = donor is not None and self.inbox.wait(
            lambda: bool(self.inbox.peek(_is_init)) or donor_left(),
            self.timeouts.hand_off_s,
            self.outbox.poll,
        )
        if not arrived or not self.inbox.peek(_is_init):
            if donor is None:
                detail = "nobody to hand it over"
            elif arrived:
                detail = f"none from {donor}: it left the ring"
            else:
                detail = f"none from {donor} in {self.timeouts.hand_off_s:g} s"
            self.host.event(EventKind.JOIN_WITHOUT_HAND_OFF, -1, detail)
            return
        payload = self.inbox.pop(_is_init)[-1]
        with self.slots.resident():
            self.host.algorithm.init_from(payload.to(self.device))
        self.host.event(
            EventKind.JOIN_INITIALISED,
            payload.round,
            f"{payload.nbytes} bytes from {payload.sender}",
        )

    def gather(self, round_: int) -> list[Payload]:
        """What to merge this round, after waiting as the schedule mode requires.

        sync: round r merges what the in-neighbours published after round r - 1; async:
        never run more than ``max_staleness`` rounds ahead of an in-neighbour. Nobody waits
        for a member the view marks a straggler: what it pushed is merged once it is here.
        With offers, the method then decides what to pull, and only that crosses the network.
        """
        schedule = self.config.schedule
        self.gather_wait_s = 0.0
        first = round_ == self.progress.first_round
        if first or not self.specs.expected or self.control.isolated:
            return []
        lag = 0 if schedule.mode == "sync" else schedule.max_staleness
        max_round = round_ - 1 if schedule.mode == "sync" else None

        def senders() -> list[int]:
            view = self.membership.current
            awaited = set(view.active(round_ - 1)) - set(view.stragglers)
            peers = self.topology.in_neighbours(view.members, self.id, round_ - 1, view.speed_of())
            return [p for p in peers if p in awaited]

        def ready() -> bool:
            if schedule.mode == "sync":  # that very round: a later one may overtake it
                return all(self.inbox.arrived(Channel.SHARE, p, round_ - 1) for p in senders())
            return all(self.inbox.newest(Channel.SHARE, p) >= round_ - 1 - lag for p in senders())

        wait_s = min(self.timeouts.round_wait_s, self.host.time_left())
        waiting = time.monotonic()
        gather_s = self.timeouts.gather_s
        if not self.inbox.wait(ready, wait_s, self.outbox.poll) and wait_s == gather_s:
            self.host.event(EventKind.WAIT_TIMEOUT, round_, f"waited {gather_s:g}s")
        self.gather_wait_s = time.monotonic() - waiting
        arrived = self.inbox.take(Channel.SHARE, max_round)
        if not self.specs.offers:
            return arrived
        with self.slots.resident():
            plan = self.host.algorithm.decide([p.to(self.device) for p in arrived])
        return self._pull({s: keys for s, keys in plan.items() if keys}, arrived)

    def _pull(self, plan: dict[int, tuple[str, ...]], offers: list[Payload]) -> list[Payload]:
        """Fetch the decided keys from each peer; a peer that cannot answer is reported."""
        round_of = {p.sender: p.round for p in offers}
        handles = self.membership.all_handles()
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
                self.host.reject(str(err))
            except Exception as err:  # noqa: BLE001 - gone, silent or failing: report it
                detail = f"from {sender}: {err!r}"
                self.host.event(EventKind.PULL_FAILED, self.progress.round, detail)
                self.host.report_unreachable(sender)
        return pulled

    def _check_pulled(
        self, answer: object, sender: int, round_: int, keys: tuple[str, ...]
    ) -> None:
        """A pull's answer: a valid PULLED payload of ``sender``'s, of ``round_`` or a later
        round of this run, holding exactly ``keys`` as this method holds them."""
        if not isinstance(answer, Payload):
            raise PayloadError(f"pull from {sender}: expected a Payload, got {type(answer)}")
        answer.validate(None, self.specs.max_payload_bytes)
        self.specs.bounds.check(answer, self.membership.current.epoch)
        if answer.channel != Channel.PULLED or answer.sender != sender:
            raise PayloadError(
                f"pull from {sender}: answered with a {answer.channel} payload of {answer.sender}"
            )
        if answer.round < round_:
            raise PayloadError(f"pull from {sender}: round {answer.round}, asked {round_}")
        check_tensors(answer, self.specs.shared, keys)

    def publish(self, round_: int) -> None:
        """Snapshot what a joiner gets, then push the shared state or the offer."""
        method, published = self.host.algorithm, self.published
        with self.slots.resident():
            shared, hand_off = cpu_snapshots(method.shared_state(), method.hand_off_state())
            offer = detach_to_cpu(method.offer() or {}) if self.specs.offers else None
        with published.lock:
            published.hand_off, published.hand_off_round = hand_off, round_
        if offer is not None:
            with published.lock:
                published.by_round[round_] = shared
                kept = self.config.checkpoint.rounds_kept(KEEP_PUBLISHED)
                for old in [r for r in published.by_round if r <= round_ - kept]:
                    del published.by_round[old]
        tensors = offer if offer is not None else shared
        if not tensors or self.control.isolated:
            return
        if not all_finite(tensors):
            raise NonFiniteError(f"round {round_}: the shared state is not finite")
        with self.membership.lock:  # the published record's too: a push and its view
            view = self.membership.view
            if published.last_push is not None:
                published.recent_pushes = [published.last_push]
            payload = self._push(round_, view.epoch, tensors)
            targets = self.topology.out_neighbours(view.members, self.id, round_, view.speed_of())
            published.last_push, published.pushed_to = payload, set(targets)
        for target in targets:
            self.outbox.send(target, payload)
        self.outbox.poll()

    def _push(self, round_: int, epoch: int, tensors: dict[str, torch.Tensor]) -> Payload:
        return Payload(
            sender=self.id,
            round=round_,
            epoch=epoch,
            seq=round_,
            tensors=tensors,
            num_samples=self.num_samples,
            channel=Channel.SHARE,
        )


def _is_init(payload: Payload) -> bool:
    return payload.channel == Channel.INIT
