"""Dynamic random topology: each client listens to a few random peers, re-drawn every block.

The draw is a pure function of (seed, block, live members, client), so the coordinator and every
client compute the same sets ahead of a round without talking. Each listener ranks every
candidate by a keyed hash of (seed, block, listener, candidate) and keeps the ``degree``
lowest: a uniform sample without replacement that, unlike shuffling the member list, keeps a
client's peers unchanged when an unrelated member dies (a dead chosen peer is replaced by the
next-ranked live one).
"""

from __future__ import annotations

import functools
import hashlib
import heapq
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ring_actors.config import TopologySection


def _rank(seed: int, block: int, listener: int, candidate: int) -> int:
    """Stable across processes and Python versions, unlike the built-in ``hash``."""
    key = f"{seed}/{block}/{listener}/{candidate}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little")


@functools.lru_cache(maxsize=16)
def _draw(
    seed: int, block: int, members: tuple[int, ...], degree: int
) -> dict[int, tuple[int, ...]]:
    """Peers each member listens to in ``block``, each set in ring order.

    Cached because every client's out-neighbours need every member's draw, and a round asks
    for all clients' sets with the same arguments.
    """
    position = {member: i for i, member in enumerate(members)}
    draw: dict[int, tuple[int, ...]] = {}
    for listener in members:
        others = [m for m in members if m != listener]
        chosen = heapq.nsmallest(degree, others, key=lambda c: _rank(seed, block, listener, c))
        draw[listener] = tuple(sorted(chosen, key=position.__getitem__))
    return draw


class Dynamic:
    """Each client listens to ``min(degree, n - 1)`` random live peers; senders are the inverse."""

    def __init__(self, degree: int, resample_every: int, seed: int) -> None:
        self.degree = degree
        self.resample_every = resample_every
        self.seed = seed

    @classmethod
    def from_section(cls, section: TopologySection, seed: int) -> Dynamic:
        return cls(section.degree, section.resample_every, seed)

    def in_neighbours(self, members: Sequence[int], client: int, round_: int) -> list[int]:
        return list(self._draw(members, round_).get(client, ()))

    def out_neighbours(self, members: Sequence[int], client: int, round_: int) -> list[int]:
        draw = self._draw(members, round_)
        if client not in draw:
            return []
        return [listener for listener, peers in draw.items() if client in peers]

    def _draw(self, members: Sequence[int], round_: int) -> dict[int, tuple[int, ...]]:
        block = round_ // self.resample_every
        return _draw(self.seed, block, tuple(members), self.degree)
