"""Topologies by name: who sends to whom among the live members."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from topologies.base import Topology
from topologies.bidirectional_ring import BidirectionalRing
from topologies.dynamic import Dynamic
from topologies.exponential import Exponential
from topologies.full import Full
from topologies.graph import Graph
from topologies.ring import Ring

if TYPE_CHECKING:
    from ring_actors.config import TopologySection

# Each builder takes the ``topology:`` config section and the run's seed.
TOPOLOGIES: dict[str, Callable[[TopologySection, int], Topology]] = {
    "ring": Ring.from_section,
    "bidirectional_ring": BidirectionalRing.from_section,
    "dynamic": Dynamic.from_section,
    "full": Full.from_section,
    "exponential": Exponential.from_section,
    "graph": Graph.from_section,
}


def build_topology(section: TopologySection, seed: int) -> Topology:
    """The topology for ``section.kind`` (the config admits only kinds registered here);
    ``seed`` drives randomised kinds (``dynamic``)."""
    return TOPOLOGIES[section.kind](section, seed)


__all__ = ["TOPOLOGIES", "Topology", "build_topology"]
