"""Exponential graph: peers at ring distances 1, 2, 4, ... so information spreads in log n hops."""

from __future__ import annotations

from topologies.base import RingOffsets


class Exponential(RingOffsets):
    """Sends to the members at ring distance 2**k < n ahead; receives from those behind."""

    def offsets(self, n: int) -> list[int]:
        distances: list[int] = []
        distance = 1
        while distance < n:
            distances.append(distance)
            distance *= 2
        return distances
