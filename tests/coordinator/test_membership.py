"""The membership table's state machine and the views it hands out."""

from __future__ import annotations

import pytest

from ring_actors.coordinator.membership import MembershipTable, MemberState
from ring_actors.delivery.view import View


def table(n: int = 4) -> MembershipTable:
    members = MembershipTable()
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


@pytest.mark.parametrize(("client", "successor"), [(0, 1), (1, 2), (2, 3), (3, 0)])
def test_view_of_four_members_closes_the_ring(client, successor):
    view = table().view()
    assert view == View(epoch=4, members=(0, 1, 2, 3), first_rounds=(0, 0, 0, 0), members_since=4)
    assert view.successor(client) == successor


def test_a_lone_member_or_a_stranger_has_no_successor():
    members = MembershipTable()
    members.add(5)
    assert members.view().successor(5) is None
    assert table().view().successor(42) is None


def test_joiners_are_active_from_their_first_round():
    members = table(3)
    members.add(9, after=0, first_round=4)
    view = members.view()
    assert view.members == (0, 9, 1, 2)
    assert view.first_rounds == (0, 4, 0, 0)
    assert view.active(3) == (0, 1, 2)
    assert view.active(4) == (0, 9, 1, 2)
    assert members.members[9].last_round == 3


def test_dead_member_bumps_epoch_and_is_bypassed():
    members = table()
    assert members.mark(2, MemberState.DEAD) is True
    assert members.epoch == 5
    assert members.live == [0, 1, 3]
    assert not members.is_live(2)
    view = members.view()
    assert view.successor(1) == 3
    assert view.members == (0, 1, 3)
    assert view.epoch == 5
    assert view.successor(2) is None


def test_done_does_not_change_live_set_or_epoch():
    members = table()
    assert members.mark(1, MemberState.RUNNING) is False
    assert members.mark(1, MemberState.DONE) is False
    assert members.members[1].state == MemberState.DONE
    assert members.epoch == 4
    assert members.live == [0, 1, 2, 3]
    assert members.view().successor(0) == 1  # a finished member still receives


def test_a_change_of_pace_moves_the_epoch_but_not_the_members_epoch():
    members = table()
    assert members.view().members_epoch == 4
    assert members.set_pace(frozenset({2}), {}) is True
    paced = members.view()
    assert (paced.epoch, paced.members_epoch) == (5, 4)
    members.mark(2, MemberState.DEAD)
    assert (members.view().epoch, members.view().members_epoch) == (6, 6)
    restored = MembershipTable.from_record(members.to_record())
    assert restored.view() == members.view()


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
    assert members.view().successor(1) == 9
    assert members.view().successor(9) == 2
    members.add(7, after=3)  # after the last member: the ring closes back to 0
    assert members.order == [0, 1, 9, 2, 3, 7]
    assert members.view().successor(7) == 0


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


def test_a_joiner_counts_only_the_rounds_it_trained():
    members = table(2)
    members.add(9, after=0, first_round=5)
    assert members.members[9].rounds_trained == 0  # rounds 0-4 were skipped, not trained
    members.seen(9, 6)
    members.seen(0, 6)
    assert members.members[9].rounds_trained == 2
    assert members.members[0].rounds_trained == 7


def test_an_offline_member_leaves_the_view_and_comes_back_to_its_place():
    members = table()
    assert members.go_offline(1, due_back_s=3.0) is True
    assert members.epoch == 5 and members.view().members == (0, 2, 3)
    assert members.remaining == [0, 1, 2, 3] and members.offline == [1]
    assert members.come_back(1, first_round=6) is True
    view = members.view()
    assert view.members == (0, 1, 2, 3) and view.first_rounds == (0, 6, 0, 0)
    assert members.epoch == 6 and members.members[1].due_back_s is None


def test_an_offline_member_is_kept_in_the_record_and_can_die():
    members = table()
    members.go_offline(2, due_back_s=1.5)
    restored = MembershipTable.from_record(members.to_record())
    assert restored.members[2].state == MemberState.OFFLINE
    assert restored.members[2].due_back_s == 1.5 and restored.offline == [2]
    restored.mark(2, MemberState.DEAD)
    assert restored.remaining == [0, 1, 3] and restored.offline == []


def test_a_joiners_donor_follows_ring_order_and_first_rounds_not_who_reported_first():
    """Reports reach the coordinator in any order: the donor must not depend on them, or a
    rerun of the same plan starts its joiner from another member's state."""
    table = MembershipTable()
    for c in range(4):
        table.add(c)
    table.add(4, after=0, first_round=2)  # order 0, 4, 1, 2, 3
    table.add(5, after=4, first_round=2)  # order 0, 4, 5, 1, 2, 3
    table.seen(2, 0)  # 2 reported a round before 0 did
    assert table.donor_for(4) == 0
    assert table.donor_for(5) == 0  # 4 starts with 5: it ends no round before 5's first
    table.mark(0, MemberState.DEAD)
    assert table.donor_for(4) == 3  # round the ring to the nearest live earlier member
    for c in (1, 2, 3):
        table.mark(c, MemberState.DEAD)
    assert table.donor_for(4) is None  # only a joiner of the same round is left
    alone = MembershipTable()
    alone.add(0)
    assert alone.donor_for(0) is None
