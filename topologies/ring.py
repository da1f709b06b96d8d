"""Directed ring: each client sends to the next live member, so a dead one is bypassed."""

from __future__ import annotations

from collections.abc import Sequence


class Ring:
    """Successor in ring order; with the dead removed from ``members`` this is the bypass."""

    def out_neighbours(self, members: Sequence[int], client: int, round_: int) -> list[int]:
        if len(members) < 2 or client not in members:
            return []
        position = list(members).index(client)
        return [members[(position + 1) % len(members)]]
