"""The coordinator's answer to "where is the run?": one typed snapshot, polled by the driver,
the in-process ring and the benchmarks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Progress:
    """A run's state at one moment, as the coordinator's membership table and results hold it."""

    round: int  # the lowest round a live member is in
    newest: int  # the newest round some member finished training
    epoch: int  # the membership epoch
    live: int  # live members
    done: int  # live members that finished all their rounds
    rounds_done: int  # client-rounds trained, departed members' included
    rounds_planned: int  # client-rounds the run will have trained when the live members finish
    finished: bool  # every live member is done
    stopped: str | None  # why the run was stopped, if it was
    errors: list[dict[str, Any]] = field(default_factory=list)  # client errors, oldest first
    latest: dict[str, float] = field(default_factory=dict)  # means of the newest full round
