"""Every registered topology from its config section, and the properties all of them share."""

from __future__ import annotations

import pytest

from ring_actors.config import ConfigError, TopologySection
from topologies import TOPOLOGIES, build_topology
from topologies.bidirectional_ring import BidirectionalRing
from topologies.dynamic import Dynamic
from topologies.exponential import Exponential
from topologies.full import Full
from topologies.graph import Graph
from topologies.ring import Ring


@pytest.fixture
def sections(tmp_path):
    edges = tmp_path / "edges.txt"
    edges.write_text("".join(f"{i} {(i + 1) % 7}\n{i} {(i + 3) % 7}\n" for i in range(7)))
    return {
        "ring": TopologySection(kind="ring"),
        "bidirectional_ring": TopologySection(kind="bidirectional_ring"),
        "dynamic": TopologySection(kind="dynamic", degree=3, resample_every=2),
        "full": TopologySection(kind="full"),
        "exponential": TopologySection(kind="exponential"),
        "graph": TopologySection(kind="graph", edges=str(edges)),
    }


def test_the_config_takes_every_registered_kind(sections):
    """The registry is the one list of kinds: each builds from its config section."""
    assert set(sections) == set(TOPOLOGIES)
    assert all(build_topology(section, seed=0) for section in sections.values())


def test_build_topology_each_kind(sections):
    expected = {
        "ring": Ring,
        "bidirectional_ring": BidirectionalRing,
        "dynamic": Dynamic,
        "full": Full,
        "exponential": Exponential,
        "graph": Graph,
    }
    for kind, section in sections.items():
        assert type(build_topology(section, seed=0)) is expected[kind]
    dynamic = build_topology(sections["dynamic"], seed=11)
    assert (dynamic.degree, dynamic.resample_every, dynamic.seed) == (3, 2, 11)
    assert (0, 1) in build_topology(sections["graph"], seed=0).edges


def test_unknown_kind_error_lists_allowed():
    allowed = r"topology.kind: must be one of 'ring', 'bidirectional_ring'.*got 'star'"
    with pytest.raises(ConfigError, match=allowed):
        TopologySection(kind="star")


@pytest.mark.parametrize("kind", sorted(TOPOLOGIES))
@pytest.mark.parametrize("members", [[0, 1], [0, 1, 2], [3, 0, 6, 5, 2], [6, 4, 2, 0, 1, 3, 5]])
def test_in_is_inverse_of_out_without_self_loops_or_strangers(sections, kind, members):
    topology = build_topology(sections[kind], seed=5)
    for round_ in (0, 3):
        outs = {c: topology.out_neighbours(members, c, round_) for c in members}
        ins = {c: topology.in_neighbours(members, c, round_) for c in members}
        for client in members:
            for peers in (outs[client], ins[client]):
                assert client not in peers
                assert len(peers) == len(set(peers))
                assert set(peers) <= set(members)
            assert ins[client] == [m for m in ins[client] if client in outs[m]]
            assert set(ins[client]) == {m for m in members if client in outs[m]}


@pytest.mark.parametrize("kind", sorted(TOPOLOGIES))
def test_absent_client_has_no_neighbours(sections, kind):
    topology = build_topology(sections[kind], seed=5)
    assert topology.out_neighbours([0, 1, 2], 4, 0) == []
    assert topology.in_neighbours([0, 1, 2], 4, 0) == []
    assert topology.out_neighbours([], 0, 0) == []
