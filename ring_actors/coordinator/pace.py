"""How fast each member goes, from the round times it reports: who is a persistent straggler
(``schedule.straggler_factor``), and each member's seconds per round for topologies that
sample by speed (``topology.similarity``).

A member's *own* round time is its reported ``round_s`` less its ``gather_wait_s``: what it
spent itself, not waiting for others, so a fast member paced by a slow in-neighbour does not
look slow. The rule, with ``k = schedule.straggler_window`` and ``f = schedule.straggler_factor``:
a live member with at least ``k`` rounds reported is a straggler while the median of its
last ``k`` own round times exceeds ``f`` times the median over the live members' medians
(the median member's). A member with fewer than ``k`` rounds keeps the mark it has.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Iterable, Mapping


def own_round_s(metrics: Mapping[str, float]) -> float | None:
    """A round's time spent by the member itself; None when the report has no round time."""
    if "round_s" not in metrics:
        return None
    return max(0.0, metrics["round_s"] - metrics.get("gather_wait_s", 0.0))


def half_octave(seconds: float) -> float:
    """``seconds`` rounded to a power of sqrt(2): speeds that jitter do not change the view."""
    return 2.0 ** (round(2 * math.log2(seconds)) / 2) if seconds > 0 else 0.0


class Pace:
    """Each member's recent own round times, and what the rule makes of them."""

    def __init__(self, factor: float | None, window: int, configured: Mapping[int, float]) -> None:
        self.factor = factor
        self.window = window
        self.configured = dict(configured)  # speed factors from the heterogeneity section
        self.times: dict[int, deque[float]] = {}

    def record(self, client_id: int, metrics: Mapping[str, float]) -> None:
        own = own_round_s(metrics)
        if own is not None:
            self.times.setdefault(client_id, deque(maxlen=self.window)).append(own)

    def median_s(self, client_id: int) -> float | None:
        """Median of the member's last ``window`` own round times; None before it has any."""
        times = self.times.get(client_id)
        return statistics.median(times) if times else None

    def ring_median_s(self, live: Iterable[int]) -> float | None:
        """The median member's median, over members with a full window."""
        medians = [m for c in live if (m := self._full_median(c)) is not None]
        return statistics.median(medians) if len(medians) >= 2 else None

    def stragglers(self, live: list[int], marked: frozenset[int]) -> frozenset[int]:
        """The live members the rule marks now (off: nobody)."""
        if self.factor is None:
            return frozenset()
        ring = self.ring_median_s(live)
        if ring is None:
            return frozenset(c for c in marked if c in live)
        found = set()
        for client_id in live:
            median = self._full_median(client_id)
            slow = client_id in marked if median is None else median > self.factor * ring
            if slow:
                found.add(client_id)
        return frozenset(found)

    def speeds(self, live: list[int]) -> dict[int, float]:
        """Seconds per round by live member, in half octaves: measured where measured (the
        median member's for the others); the configured speed factors before any is."""
        measured = {c: m for c in live if (m := self.median_s(c)) is not None}
        if not measured:
            return {c: self.configured.get(c, 1.0) for c in live}
        typical = statistics.median(measured.values())
        return {c: half_octave(measured.get(c, typical)) for c in live}

    def _full_median(self, client_id: int) -> float | None:
        times = self.times.get(client_id)
        return statistics.median(times) if times and len(times) == self.window else None
