"""The membership table's state machine over a ring topology."""

from __future__ import annotations

import pytest

from ring_actors.membership import MembershipTable, MemberState, View
from topologies.ring import Ring


def table(n: int = 4) -> MembershipTable:
    members = MembershipTable(Ring())
    for client in range(n):
        members.add(client, node_id=f"node{client % 2}")
    return members


def test_members_join_in_ring_order_and_bump_the_epoch():
    members = table()
    assert members.order == [0, 1, 2, 3]
    assert members.live == [0, 1, 2, 3]
    assert members.epoch == 4
    assert members.members[3].node_id == "node1"
    assert members.members[0].state == MemberState.STARTING


@pytest.mark.parametrize(
    ("client", "successor", "predecessor"), [(0, 1, 3), (1, 2, 0), (2, 3, 1), (3, 0, 2)]
)
def test_views_of_four_members(client, successor, predecessor):
    view = table().view(client)
    assert view == View(
        epoch=4, successors=(successor,), predecessors=(predecessor,), members=(0, 1, 2, 3)
    )


def test_dead_member_bumps_epoch_and_is_bypassed():
    members = table()
    assert members.mark(2, MemberState.DEAD) is True
    assert members.epoch == 5
    assert members.live == [0, 1, 3]
    assert not members.is_live(2)
    assert members.view(1).successors == (3,)
    assert members.view(3).predecessors == (1,)
    assert members.view(1).members == (0, 1, 3)
    assert members.view(1).epoch == 5
    dead = members.view(2)
    assert dead.successors == () and dead.predecessors == ()


def test_done_does_not_change_live_set_or_epoch():
    members = table()
    assert members.mark(1, MemberState.RUNNING) is False
    assert members.mark(1, MemberState.DONE) is False
    assert members.members[1].state == MemberState.DONE
    assert members.epoch == 4
    assert members.live == [0, 1, 2, 3]
    assert members.view(0).successors == (1,)  # a finished member still receives


def test_marking_the_same_state_twice_is_a_no_op():
    members = table()
    assert members.mark(0, MemberState.DEAD)
    assert members.mark(0, MemberState.DEAD) is False
    assert members.epoch == 5


def test_add_is_idempotent():
    members = table()
    members.add(1, node_id="elsewhere")
    members.add(1, after=3)
    assert members.order == [0, 1, 2, 3]
    assert members.epoch == 4
    assert members.members[1].node_id == "node1"


def test_insertion_after_a_given_member():
    members = table()
    members.add(9, after=1)
    assert members.order == [0, 1, 9, 2, 3]
    assert members.epoch == 5
    assert members.view(1).successors == (9,)
    assert members.view(9).successors == (2,)
    assert members.view(2).predecessors == (9,)
    members.add(7, after=3)  # after the last member: the ring closes back to 0
    assert members.order == [0, 1, 9, 2, 3, 7]
    assert members.view(7).successors == (0,)


def test_insertion_after_an_unknown_member_fails():
    members = table()
    with pytest.raises(ValueError):
        members.add(9, after=42)


def test_dead_stays_dead():
    members = table()
    members.mark(3, MemberState.DEAD)
    epoch = members.epoch
    for state in (MemberState.RUNNING, MemberState.STARTING, MemberState.DONE):
        assert members.mark(3, state) is False
        assert members.members[3].state == MemberState.DEAD
    assert members.epoch == epoch
    assert members.live == [0, 1, 2]
    members.add(3)  # a rejoin under the same id does not resurrect it
    assert members.members[3].state == MemberState.DEAD
    assert members.epoch == epoch


def test_seen_records_the_highest_round():
    members = table()
    before = members.members[0].last_seen
    members.seen(0, 5)
    members.seen(0, 2)
    members.seen(0)
    assert members.members[0].last_round == 5
    assert members.members[0].last_seen >= before
