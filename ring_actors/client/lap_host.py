"""What every kind of lap shares: the result it ends with, who leads it, and what it needs
from its client (``ring_lap.py``'s token, ``chunked_lap.py``'s chunks and
``collective_lap.py``'s engine all run on it)."""

from __future__ import annotations

from dataclasses import dataclass
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
