"""The token lap: one token goes once round the live ring collecting contributions, and a
second lap hands the total to everyone. Exact over whoever contributed, and it survives
failures: unacknowledged hops are re-routed by the outbox, a lost token is restarted by the
lap's leader (once per membership epoch, and after ``timeouts.lap_retry_s``), and a token
of a dead epoch or one that went round is dropped. The way every lap can go: the others
(chunks, the engine) fall back to it."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import torch

from ring_actors.client.chunked_lap import is_chunk
from ring_actors.client.lap_arithmetic import accumulate, mismatch
from ring_actors.client.lap_host import LapResult, LapRun
from ring_actors.delivery.event_kinds import EventKind
from ring_actors.delivery.payloads import Channel, LapHeader, Payload
from ring_actors.delivery.view import View

if TYPE_CHECKING:
    from ring_actors.client.ring_lap import RingLaps


class TokenLap:
    """One member's side of one lap's token attempts, for the length of a ``RingLaps.run``."""

    def __init__(self, laps: RingLaps, run: LapRun) -> None:
        self.laps, self.host, self.run = laps, laps.host, run
        self.mine: set[int] = set()  # the attempts this member started as leader
        self.epoch = -1  # the epoch of its last attempt: one per membership epoch

    def wanted(self, view: View) -> bool:
        return True

    def start_due(self, view: View, leader: int | None, now: float) -> LapResult | None:
        """As the lap's leader, start a token; again in a new epoch or once the last one
        has not come back in time. Alone, the total is this member's own."""
        host, run = self.host, self.run
        if leader != host.id:
            return None
        stale = self.epoch != view.epoch
        if self.mine and not stale and now - run.attempt_at <= self.laps.timeouts.lap_retry_s:
            return None
        if view.successor(host.id) is None:
            return self.laps.finish(run.name, run.round, run.contribution, (host.id,))
        attempt = max(self.mine, default=-1) + 1
        if run.led:
            host.event(EventKind.LAP_RESTARTED, run.round, f"lap {run.name!r}, attempt {attempt}")
        self.mine.add(attempt)
        run.led += 1
        run.attempt_at, self.epoch = now, view.epoch
        token: dict[str, torch.Tensor] = {}
        accumulate(token, run.contribution)
        header = LapHeader(
            run.name,
            leader=host.id,
            attempt=attempt,
            epoch=view.epoch,
            visited=(host.id,),
            contributors=(host.id,) if run.contribution else (),
        )
        self.laps.send_on(Channel.LAP, run.round, header, token)
        return None

    def take(self, view: View, leader: int | None) -> LapResult | None:
        """Add into and pass on each token that reached this member; the total once this
        member's own token came back."""
        host, run = self.host, self.run
        for token in host.inbox.pop(self.is_mine):
            header = token.lap
            wrong = mismatch(token.tensors, run.contribution)
            if wrong is not None:  # it would broadcast into, or cast, our contribution
                host.event(EventKind.LAP_TOKEN_REFUSED, run.round, f"lap {run.name!r}: {wrong}")
                continue
            if header.leader == host.id:
                if header.attempt in self.mine and header.epoch == view.epoch:
                    return self.laps.finish(run.name, run.round, token.tensors, header.contributors)
                continue
            dead_epoch = header.epoch < view.epoch
            if dead_epoch or header.leader not in view.members or host.id in header.visited:
                continue  # a dead epoch's or a looping token: the live leader restarts
            total = dict(token.tensors)
            contributors = header.contributors
            if run.contribution:
                accumulate(total, run.contribution)
                contributors = (*contributors, host.id)
            self.laps.forward(token, total, contributors)
            run.progressed_at = time.monotonic()
        return None

    def waiting_on(self, epoch: int) -> bool:
        return bool(self.host.inbox.peek(self.is_mine))

    def is_mine(self, payload: Payload) -> bool:
        """A collecting token of this lap."""
        return token_of(payload, self.run.name, self.run.round)


def token_of(payload: Payload, name: str, round_: int) -> bool:
    """A collecting token of lap ``name`` in ``round_``."""
    return (
        payload.channel == Channel.LAP
        and payload.lap is not None
        and payload.lap.name == name
        and payload.round == round_
        and not is_chunk(payload)
    )
