"""Bidirectional ring: each client exchanges with both ring neighbours."""

from __future__ import annotations

from topologies.base import RingOffsets


class BidirectionalRing(RingOffsets):
    """Successor and predecessor; with two members they coincide and appear once."""

    def offsets(self, n: int) -> list[int]:
        return [1, -1]
