"""The topology interface: given the live membership, whom does a client send to."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class Topology(Protocol):
    """Out-neighbours of a client among the live members (in ring order) at a round.

    Implementations are pure functions of their arguments (and a seed), so any round's
    neighbour sets can be regenerated, and a dead member is never a neighbour because only
    live members are passed in.
    """

    def out_neighbours(self, members: Sequence[int], client: int, round_: int) -> list[int]: ...


def in_neighbours(
    topology: Topology, members: Sequence[int], client: int, round_: int
) -> list[int]:
    """Members that send to ``client``: the inverse of ``out_neighbours``."""
    return [m for m in members if client in topology.out_neighbours(members, m, round_)]
