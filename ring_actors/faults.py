"""The fault plan: which injected faults apply to a client at a round."""

from __future__ import annotations

from collections.abc import Sequence

from ring_actors.config import FaultSection


def slow_delay(plan: Sequence[FaultSection], client_id: int, round_: int) -> float:
    """Seconds a client sleeps in ``round_``: the latest slow entry that has started applies."""
    delay = 0.0
    for entry in sorted(plan, key=lambda e: e.at_round):
        if entry.at_round <= round_ and client_id in entry.slow:
            delay = entry.delay_s
    return delay


def joins_due(plan: Sequence[FaultSection], ring_round: int, applied: set[int]) -> list[int]:
    """Indices of join entries the ring has reached (``ring_round``) and not yet applied."""
    return [
        index
        for index, entry in enumerate(plan)
        if entry.join and entry.at_round <= ring_round and index not in applied
    ]
