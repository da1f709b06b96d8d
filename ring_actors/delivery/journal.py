"""What a client tells the coordinator, kept by the client so a restarted coordinator can
replay it. Plain data: the coordinator reads it without importing torch."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Literal


@dataclass(frozen=True)
class JournalEntry:
    """A report a client sent the coordinator, kept so a restarted coordinator can replay it.

    ``round``: the metrics of a finished round. ``done``: the end counters (lost payloads,
    acknowledged hops, bytes sent) in ``metrics``.
    """

    kind: Literal["round", "done"]
    round: int
    metrics: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, record: Mapping) -> JournalEntry:
        return cls(record["kind"], int(record["round"]), dict(record["metrics"]))
