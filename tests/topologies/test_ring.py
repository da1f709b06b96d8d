"""The directed ring topology, neighbour inversion and the topology registry."""

from __future__ import annotations

import pytest

from topologies import TOPOLOGIES, build_topology, in_neighbours
from topologies.ring import Ring


def test_successor_in_order_and_wraps_around():
    ring = Ring()
    members = [4, 7, 1, 9]
    assert ring.out_neighbours(members, 4, 0) == [7]
    assert ring.out_neighbours(members, 7, 0) == [1]
    assert ring.out_neighbours(members, 1, 3) == [9]
    assert ring.out_neighbours(members, 9, 0) == [4]


def test_works_on_tuples():
    assert Ring().out_neighbours((5, 6, 8), 8, 0) == [5]


def test_two_members_send_to_each_other():
    ring = Ring()
    assert ring.out_neighbours([0, 1], 0, 0) == [1]
    assert ring.out_neighbours([0, 1], 1, 0) == [0]


@pytest.mark.parametrize(("members", "client"), [([], 0), ([3], 3), ([0, 1, 2], 5)])
def test_single_or_absent_member_has_no_neighbours(members, client):
    assert Ring().out_neighbours(members, client, 0) == []
    assert in_neighbours(Ring(), members, client, 0) == []


@pytest.mark.parametrize("members", [[0, 1], [0, 1, 2], [3, 0, 7, 5, 2]])
def test_in_neighbours_is_the_inverse_of_out_neighbours(members):
    ring = Ring()
    for client in members:
        for other in members:
            sends = client in ring.out_neighbours(members, other, 0)
            assert sends == (other in in_neighbours(ring, members, client, 0))
        assert len(in_neighbours(ring, members, client, 0)) == 1
    position = {c: i for i, c in enumerate(members)}
    for client in members:
        (pred,) = in_neighbours(ring, members, client, 0)
        assert position[pred] == (position[client] - 1) % len(members)


def test_build_topology_ring():
    assert isinstance(build_topology("ring"), Ring)
    assert "ring" in TOPOLOGIES


def test_unknown_kind_error_lists_allowed():
    with pytest.raises(ValueError, match=r"unknown topology 'star'.*allowed: ring"):
        build_topology("star")
