"""The directed ring: successor in ring order, predecessor as the inverse."""

from __future__ import annotations

import pytest

from topologies.ring import Ring


def test_successor_in_order_and_wraps_around():
    ring = Ring()
    members = [4, 7, 1, 9]
    assert ring.out_neighbours(members, 4, 0) == [7]
    assert ring.out_neighbours(members, 7, 0) == [1]
    assert ring.out_neighbours(members, 1, 3) == [9]
    assert ring.out_neighbours(members, 9, 0) == [4]


def test_predecessor_in_order_and_wraps_around():
    ring = Ring()
    members = [4, 7, 1, 9]
    assert ring.in_neighbours(members, 4, 0) == [9]
    assert ring.in_neighbours(members, 1, 0) == [7]


def test_works_on_tuples():
    assert Ring().out_neighbours((5, 6, 8), 8, 0) == [5]


def test_two_members_send_to_each_other():
    ring = Ring()
    assert ring.out_neighbours([0, 1], 0, 0) == [1]
    assert ring.out_neighbours([0, 1], 1, 0) == [0]


def test_dead_member_is_bypassed():
    ring = Ring()
    assert ring.out_neighbours([0, 1, 2, 3], 1, 0) == [2]
    assert ring.out_neighbours([0, 1, 3], 1, 0) == [3]
    assert ring.in_neighbours([0, 1, 3], 3, 0) == [1]


@pytest.mark.parametrize(("members", "client"), [([], 0), ([3], 3), ([0, 1, 2], 5)])
def test_single_or_absent_member_has_no_neighbours(members, client):
    assert Ring().out_neighbours(members, client, 0) == []
    assert Ring().in_neighbours(members, client, 0) == []
