"""Topologies by name: who sends to whom among the live members."""

from __future__ import annotations

from topologies.base import Topology, in_neighbours
from topologies.ring import Ring

TOPOLOGIES: dict[str, type[Topology]] = {"ring": Ring}


def build_topology(kind: str) -> Topology:
    """A topology instance for ``topology.kind``."""
    if kind not in TOPOLOGIES:
        raise ValueError(f"unknown topology {kind!r}; allowed: {', '.join(TOPOLOGIES)}")
    return TOPOLOGIES[kind]()


__all__ = ["TOPOLOGIES", "Topology", "build_topology", "in_neighbours"]
