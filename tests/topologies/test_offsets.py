"""Bidirectional ring, full and exponential: neighbours at fixed ring distances."""

from __future__ import annotations

import pytest

from topologies.bidirectional_ring import BidirectionalRing
from topologies.exponential import Exponential
from topologies.full import Full


def test_bidirectional_ring_successor_and_predecessor():
    ring = BidirectionalRing()
    members = [4, 7, 1, 9]
    assert ring.out_neighbours(members, 4, 0) == [7, 9]
    assert ring.in_neighbours(members, 1, 0) == [7, 9]


def test_bidirectional_ring_two_members_no_duplicates():
    ring = BidirectionalRing()
    assert ring.out_neighbours([3, 5], 3, 0) == [5]
    assert ring.in_neighbours([3, 5], 3, 0) == [5]


def test_full_is_everyone_else_in_ring_order_after_the_client():
    members = [4, 7, 1, 9]
    assert Full().out_neighbours(members, 1, 0) == [9, 4, 7]
    assert sorted(Full().in_neighbours(members, 1, 0)) == [4, 7, 9]


@pytest.mark.parametrize(
    ("n", "distances"),
    [(2, [1]), (3, [1, 2]), (4, [1, 2]), (5, [1, 2, 4]), (8, [1, 2, 4]), (9, [1, 2, 4, 8])],
)
def test_exponential_distances_are_powers_of_two_below_n(n, distances):
    members = [10 + 3 * i for i in range(n)]  # ids unrelated to positions
    for position, client in enumerate(members):
        expected_out = [members[(position + d) % n] for d in distances]
        expected_in = [members[(position - d) % n] for d in distances]
        assert Exponential().out_neighbours(members, client, 0) == expected_out
        assert Exponential().in_neighbours(members, client, 0) == expected_in


def test_exponential_recomputes_distances_over_the_live_members():
    members = list(range(6))
    assert Exponential().out_neighbours(members, 0, 0) == [1, 2, 4]
    live = [0, 2, 3, 4, 5]  # 1 died: distances are counted among the live
    assert Exponential().out_neighbours(live, 0, 0) == [2, 3, 5]
