"""What every way of summing a lap shares: the result it ends with, who leads it, what it
needs from its client, and the shape of a way (``LapWay``: ``token_lap.py``'s one token,
``chunked_lap.py``'s chunks and ``collective_lap.py``'s engine; ``ring_lap.py`` chooses)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol

import torch

from ring_actors.delivery.event_kinds import EventKind
from ring_actors.delivery.inbox import Inbox
from ring_actors.delivery.payloads import LAP_CHANNELS, Payload
from ring_actors.delivery.view import View


def is_lap(payload: Payload) -> bool:
    return payload.channel in LAP_CHANNELS


def lap_leader(view: View, round_: int) -> int | None:
    """The member that starts the round's laps: it rotates, and is always one that trains."""
    active = view.active(round_)
    return active[round_ % len(active)] if active else None


@dataclass(frozen=True)
class LapResult:
    total: dict[str, torch.Tensor]
    contributors: tuple[int, ...]


class LapHost(Protocol):
    """What a lap needs from its client."""

    id: int
    inbox: Inbox

    @property
    def current_view(self) -> View: ...

    def send(self, target: int, payload: Payload) -> None: ...

    def tick(self) -> None: ...

    def event(self, kind: EventKind, round_: int, detail: str) -> None: ...

    def fetch_lap_result(self, leader: int, name: str, round_: int) -> LapResult | None: ...

    def departing(self) -> bool:
        """Whether an off period began mid-round: it takes part in no more of the lap."""

    def time_left(self) -> float:
        """Seconds of the run's time budget left (inf without one)."""


@dataclass
class LapRun:
    """One member's run of one lap, shared by the ways it tries: what it adds, the attempts
    it led (of any way: a later one is a restart), when it last started one, when it last
    saw progress, and when the ways that go round the ring give up."""

    name: str
    round: int
    contribution: dict[str, torch.Tensor]
    led: int = 0
    attempt_at: float = 0.0
    progressed_at: float = field(default_factory=time.monotonic)
    began: float = field(default_factory=time.monotonic)
    deadline: float = 0.0
    why: str | None = None  # why the deadline is early: the run's time budget

    @property
    def key(self) -> tuple[str, int]:
        return self.name, self.round

    def start_clock(self, give_up_s: float, time_left_s: float) -> None:
        """The ring's give-up counts from now, the run's time budget allowing."""
        self.began = self.progressed_at = time.monotonic()
        budget_s = max(0.0, time_left_s)
        self.deadline = self.began + min(give_up_s, budget_s)
        self.why = "the time budget ended" if budget_s < give_up_s else None


class LapWay(Protocol):
    """One way one member takes part in one lap. ``RingLaps.run`` asks the first way that
    wants the current view to start (or restart) an attempt when due, then every way to take
    the messages it is waiting for; any of them may end with the lap's result."""

    def wanted(self, view: View) -> bool:
        """Whether this way starts this member's attempts in ``view``."""

    def start_due(self, view: View, leader: int | None, now: float) -> LapResult | None: ...

    def take(self, view: View, leader: int | None) -> LapResult | None: ...

    def waiting_on(self, epoch: int) -> bool:
        """Whether a message this way takes is in the inbox."""
