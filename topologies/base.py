"""The topology interface: given the live membership, who sends to whom at a round."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ring_actors.config import TopologySection

# Seconds a round takes each member (measured, or its configured speed factor), by member id;
# only ratios matter. Topologies that ignore speed ignore it.
Speeds = Mapping[int, float]


class Topology(Protocol):
    """Neighbours of a client among the live members (in ring order) at a round.

    Implementations are pure functions of their arguments (and a seed), so the coordinator and
    every client compute the same sets ahead of a round, and a dead member is never a neighbour
    because only live members are passed in. A client not in ``members`` has no neighbours.
    ``speeds`` come with the view, the same on every client, so a topology may use them.
    """

    def out_neighbours(
        self, members: Sequence[int], client: int, round_: int, speeds: Speeds | None = None
    ) -> list[int]:
        """Members that ``client`` sends to."""
        ...

    def in_neighbours(
        self, members: Sequence[int], client: int, round_: int, speeds: Speeds | None = None
    ) -> list[int]:
        """Members that ``client`` listens to: the inverse of ``out_neighbours``."""
        ...


class RingOffsets:
    """Neighbours at fixed signed distances along the ring order of the live members.

    Sending at distance ``+d`` means receiving from ``-d``, so both directions come from the
    same offsets without scanning every member. Subclasses only say which distances.
    """

    @classmethod
    def from_section(cls, section: TopologySection, seed: int) -> RingOffsets:
        """Fixed offsets take no settings and no randomness."""
        return cls()

    def offsets(self, n: int) -> list[int]:
        """Signed ring distances a client sends to when ``n`` members are live."""
        raise NotImplementedError

    def out_neighbours(
        self, members: Sequence[int], client: int, round_: int, speeds: Speeds | None = None
    ) -> list[int]:
        return self._at(members, client, sign=1)

    def in_neighbours(
        self, members: Sequence[int], client: int, round_: int, speeds: Speeds | None = None
    ) -> list[int]:
        return self._at(members, client, sign=-1)

    def _at(self, members: Sequence[int], client: int, sign: int) -> list[int]:
        if client not in members:
            return []
        n = len(members)
        position = list(members).index(client)
        peers: list[int] = []
        for offset in self.offsets(n):
            peer = members[(position + sign * offset) % n]
            if peer != client and peer not in peers:
                peers.append(peer)
        return peers
