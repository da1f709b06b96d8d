"""Directed ring: each client sends to the next live member, so a dead one is bypassed."""

from __future__ import annotations

from topologies.base import RingOffsets


class Ring(RingOffsets):
    """Successor in ring order; with the dead removed from ``members`` this is the bypass."""

    def offsets(self, n: int) -> list[int]:
        return [1]
