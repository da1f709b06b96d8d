"""Dynamic random topology: each client listens to a few random peers, re-drawn every block.

The draw is a pure function of (seed, block, live members, their speeds, client), so the
coordinator and every client compute the same sets ahead of a round without talking. Each
listener gives every candidate a keyed hash of (seed, block, listener, candidate), turned into
a sampling key, and keeps the ``degree`` lowest keys: a sample without replacement that,
unlike shuffling the member list, keeps a client's peers unchanged when an unrelated member
dies (a dead chosen peer is replaced by the next-ranked live one).

With ``similarity`` > 0 the sample prefers peers of similar speed, so a fast client is rarely
paced by a slow in-neighbour: candidate ``c`` of listener ``l`` has weight

    w(l, c) = (min(s_l, s_c) / max(s_l, s_c)) ** similarity

where ``s`` is a member's seconds per round from the view; the key is ``E / w`` with ``E`` the
hash turned into an exponential variate, which draws without replacement with probability
proportional to ``w`` (Efraimidis and Spirakis). ``similarity`` 0, or speeds unknown, is the
uniform draw, peer for peer.
"""

from __future__ import annotations

import functools
import hashlib
import heapq
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from topologies.base import Speeds

if TYPE_CHECKING:
    from ring_actors.config import TopologySection


def _rank(seed: int, block: int, listener: int, candidate: int) -> int:
    """Stable across processes and Python versions, unlike the built-in ``hash``."""
    key = f"{seed}/{block}/{listener}/{candidate}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little")


def similarity_weight(own_s: float | None, peer_s: float | None, similarity: float) -> float:
    """``(min / max) ** similarity`` of two speeds: 1 for equals, towards 0 as they part;
    1 when either is unknown."""
    if not own_s or not peer_s or similarity == 0:
        return 1.0
    return (min(own_s, peer_s) / max(own_s, peer_s)) ** similarity


def _key(seed: int, block: int, listener: int, candidate: int, weight: float) -> float:
    """An exponential variate from the hash, over the weight: lower is likelier chosen.
    Monotone in the hash, so equal weights order peers exactly as the hash does."""
    uniform = (_rank(seed, block, listener, candidate) + 0.5) / 2.0**64
    return -math.log1p(-uniform) / weight


@functools.lru_cache(maxsize=16)
def _draw(
    seed: int,
    block: int,
    members: tuple[int, ...],
    degree: int,
    speeds: tuple[float | None, ...],
    similarity: float,
) -> dict[int, tuple[int, ...]]:
    """Peers each member listens to in ``block``, each set in ring order (``speeds`` by
    position in ``members``).

    Cached because every client's out-neighbours need every member's draw, and a round asks
    for all clients' sets with the same arguments.
    """
    position = {member: i for i, member in enumerate(members)}
    draw: dict[int, tuple[int, ...]] = {}
    for listener in members:
        own = speeds[position[listener]]
        others = [m for m in members if m != listener]

        def key(c: int, listener: int = listener, own: float | None = own) -> float:
            weight = similarity_weight(own, speeds[position[c]], similarity)
            return _key(seed, block, listener, c, weight)

        chosen = heapq.nsmallest(degree, others, key=key)
        draw[listener] = tuple(sorted(chosen, key=position.__getitem__))
    return draw


class Dynamic:
    """Each client listens to ``min(degree, n - 1)`` random live peers; senders are the inverse."""

    def __init__(
        self, degree: int, resample_every: int, seed: int, similarity: float = 0.0
    ) -> None:
        self.degree = degree
        self.resample_every = resample_every
        self.seed = seed
        self.similarity = similarity

    @classmethod
    def from_section(cls, section: TopologySection, seed: int) -> Dynamic:
        return cls(section.degree, section.resample_every, seed, section.similarity)

    def in_neighbours(
        self, members: Sequence[int], client: int, round_: int, speeds: Speeds | None = None
    ) -> list[int]:
        return list(self._draw(members, round_, speeds).get(client, ()))

    def out_neighbours(
        self, members: Sequence[int], client: int, round_: int, speeds: Speeds | None = None
    ) -> list[int]:
        draw = self._draw(members, round_, speeds)
        if client not in draw:
            return []
        return [listener for listener, peers in draw.items() if client in peers]

    def _draw(
        self, members: Sequence[int], round_: int, speeds: Speeds | None
    ) -> dict[int, tuple[int, ...]]:
        block = round_ // self.resample_every
        known = tuple((speeds or {}).get(m) for m in members)
        return _draw(self.seed, block, tuple(members), self.degree, known, self.similarity)
