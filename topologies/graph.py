"""Fixed directed graph from an edge-list file, restricted each round to the live members."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from topologies.base import Speeds

if TYPE_CHECKING:
    from ring_actors.config import TopologySection


def read_edges(path: str | Path) -> frozenset[tuple[int, int]]:
    """``(sender, receiver)`` pairs from lines ``sender receiver``; ``#`` starts a comment.

    A malformed line or a self-loop raises ``ValueError`` naming the file and line, so a typo
    in a long edge list is found without bisecting it.
    """
    edges: set[tuple[int, int]] = set()
    lines = Path(path).read_text().splitlines()
    for number, line in enumerate(lines, start=1):
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        if len(fields) != 2 or not all(f.isdecimal() for f in fields):
            raise ValueError(
                f"{path}, line {number}: expected 'sender receiver' as two client ids, "
                f"got {line.strip()!r}"
            )
        sender, receiver = int(fields[0]), int(fields[1])
        if sender == receiver:
            raise ValueError(f"{path}, line {number}: self-loop {sender} -> {receiver}")
        edges.add((sender, receiver))
    return frozenset(edges)


class Graph:
    """Sends along the listed edges whose both ends are live; neighbours come in ring order."""

    def __init__(self, edges: Iterable[tuple[int, int]]) -> None:
        self.edges = frozenset(edges)

    @classmethod
    def from_section(cls, section: TopologySection, seed: int) -> Graph:
        if section.edges is None:
            raise ValueError("topology.edges: must be a path when kind is 'graph', got None")
        return cls(read_edges(section.edges))

    def out_neighbours(
        self, members: Sequence[int], client: int, round_: int, speeds: Speeds | None = None
    ) -> list[int]:
        if client not in members:
            return []
        return [m for m in members if (client, m) in self.edges]

    def in_neighbours(
        self, members: Sequence[int], client: int, round_: int, speeds: Speeds | None = None
    ) -> list[int]:
        if client not in members:
            return []
        return [m for m in members if (m, client) in self.edges]
