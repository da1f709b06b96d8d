"""Fully connected: every client exchanges with every other live member."""

from __future__ import annotations

from topologies.base import RingOffsets


class Full(RingOffsets):
    """Everyone else, listed in ring order starting after the client."""

    def offsets(self, n: int) -> list[int]:
        return list(range(1, n))
