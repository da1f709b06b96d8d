"""The roster's transitions: each changes the membership table, the handles and the health
records together, and a restore replaces all three in one call, seen by every part."""

from __future__ import annotations

from ring_actors.config import config_from_dict
from ring_actors.coordinator.changes import RingChanges
from ring_actors.coordinator.history import HistoryLog
from ring_actors.coordinator.membership import MemberState
from ring_actors.coordinator.results import Results
from ring_actors.coordinator.roster import Roster
from tests.helpers.scripted_clients import ScriptedClient


def started(n: int = 4) -> Roster:
    """A roster of ``n`` members registered and started, as at a launch."""
    roster = Roster()
    for client in range(n):
        roster.register(client, ScriptedClient(client), f"node{client}")
    for client in range(n):
        roster.start(client)
    return roster


def state(roster: Roster, client: int) -> MemberState:
    return roster.table.members[client].state


def test_register_adds_a_member_at_the_end_with_its_handle():
    roster = Roster()
    handles = [ScriptedClient(c) for c in range(2)]
    for client, handle in enumerate(handles):
        roster.register(client, handle, "node")
    assert roster.table.order == [0, 1] and roster.table.live == [0, 1]
    assert roster.table.epoch == 2 and roster.handles == {0: handles[0], 1: handles[1]}
    assert state(roster, 0) == MemberState.STARTING and not roster.health.last_report


def test_start_runs_a_member_and_starts_its_stall_clock_without_a_new_epoch():
    roster = Roster()
    roster.register(0, ScriptedClient(0), "node")
    roster.start(0)
    assert state(roster, 0) == MemberState.RUNNING and 0 in roster.health.last_report
    assert roster.table.epoch == 1  # starting leaves the live set as it was


def test_admit_splices_a_joiner_in_running_from_its_first_round():
    roster = started()
    joiner = ScriptedClient(9)
    roster.admit(9, joiner, "node9", after=1, first_round=3)
    assert roster.table.order == [0, 1, 9, 2, 3] and roster.table.epoch == 5
    assert roster.table.members[9].first_round == 3 and state(roster, 9) == MemberState.RUNNING
    assert roster.handles[9] is joiner and 9 in roster.health.last_report


def test_adopt_takes_a_known_members_new_actor_and_refuses_a_stranger():
    roster = started(2)
    new = ScriptedClient(1)
    assert roster.adopt(1, new, "elsewhere")
    assert roster.handles[1] is new and roster.table.members[1].node_id == "elsewhere"
    assert not roster.adopt(7, ScriptedClient(7), "node") and 7 not in roster.handles
    assert roster.table.epoch == 2


def test_a_report_moves_a_members_round_and_stall_clock():
    roster = started(2)
    roster.health.last_report[0] = 0.0
    roster.reported(0, 4)
    assert roster.table.members[0].last_round == 4 and roster.health.last_report[0] > 0.0


def test_a_finished_member_stays_live():
    roster = started(2)
    roster.finish(1)
    assert state(roster, 1) == MemberState.DONE and roster.table.live == [0, 1]
    assert roster.table.epoch == 2


def test_going_offline_leaves_the_ring_but_not_the_run_and_forgets_probes():
    roster = started()
    roster.health.start_probes([2], roster.handles, heartbeat_s=1.0)
    roster.suspect(2)
    assert roster.go_offline(2, due_back_s=5.0)
    assert roster.table.live == [0, 1, 3] and roster.table.offline == [2]
    assert roster.table.remaining == [0, 1, 2, 3] and roster.table.epoch == 5
    assert 2 not in roster.health.probes and 2 not in roster.health.suspects
    assert not roster.go_offline(2, due_back_s=6.0)  # already away: nothing changes
    assert roster.table.epoch == 5


def test_coming_back_takes_its_own_place_in_the_actor_it_answers_in():
    roster = started()
    roster.go_offline(2, due_back_s=5.0)
    del roster.health.last_report[2]
    back = ScriptedClient(2)
    assert roster.come_back(2, first_round=6, handle=back)
    assert roster.table.live == [0, 1, 2, 3] and roster.table.offline == []
    assert roster.table.members[2].first_round == 6 and roster.table.epoch == 6
    assert roster.handles[2] is back and 2 in roster.health.last_report


def test_coming_back_while_never_away_only_takes_the_actor():
    roster = started()
    again = ScriptedClient(1)
    assert not roster.come_back(1, first_round=6, handle=again)
    assert roster.handles[1] is again and roster.table.members[1].first_round == 0
    assert roster.table.epoch == 4


def test_marking_dead_takes_a_member_out_of_the_run_and_a_hung_one_is_remembered():
    roster = started()
    roster.suspect(1)
    assert roster.mark_dead(1)
    assert roster.table.live == [0, 2, 3] and roster.table.remaining == [0, 2, 3]
    assert roster.table.epoch == 5 and 1 not in roster.health.suspects
    assert 1 not in roster.health.hung and 1 in roster.handles  # it may yet come back
    assert roster.mark_dead(3, hung=True) and roster.health.hung == {3}


def test_marking_dead_twice_or_an_offline_member_leaves_no_ring_to_change():
    roster = started()
    roster.mark_dead(1)
    assert not roster.mark_dead(1, hung=True)
    assert roster.health.hung == set() and roster.table.epoch == 5
    roster.go_offline(2, due_back_s=5.0)
    assert not roster.mark_dead(2)  # not live: the ring closed over it when it left
    assert roster.table.offline == [] and roster.table.remaining == [0, 3]


def test_a_bypass_heals_once_every_live_member_passed_it():
    roster = started(3)
    for client in range(3):
        roster.reported(client, 2)
    roster.mark_dead(2)
    roster.bypass(at_s=1.5)
    assert roster.health.healing == [(1.5, 3)]
    roster.reported(0, 3)
    assert roster.heal() == []  # member 1 has not finished round 3
    roster.reported(1, 3)
    assert roster.heal() == [(1.5, 3)] and roster.health.healing == []


def test_with_nobody_live_a_bypass_has_nothing_to_heal():
    roster = started(1)
    roster.mark_dead(0)
    roster.bypass(at_s=1.0)
    assert roster.health.healing == [] and roster.heal() == []


def test_a_restarted_member_rejoins_in_its_new_process_after_a_new_place():
    roster = started()
    roster.mark_dead(0)
    new = ScriptedClient(0)
    roster.rejoin(0, new, "node7", after=2, first_round=5)
    assert roster.table.order == [1, 2, 0, 3] and roster.table.live == [1, 2, 0, 3]
    assert state(roster, 0) == MemberState.RUNNING and roster.table.epoch == 6
    assert roster.table.members[0].first_round == 5 and roster.table.members[0].node_id == "node7"
    assert roster.handles[0] is new and 0 in roster.health.last_report


def test_a_member_bypassed_as_hung_revives_with_its_own_first_round():
    roster = started()
    roster.mark_dead(3, hung=True)
    roster.revive(3, after=0)
    assert roster.table.order == [0, 3, 1, 2] and state(roster, 3) == MemberState.RUNNING
    assert roster.health.hung == set() and roster.table.members[3].first_round == 0
    assert roster.table.epoch == 6


def test_a_resumed_member_runs_in_the_view_it_had():
    roster = Roster()
    roster.register(0, ScriptedClient(0), "node")
    roster.resume(0)
    assert state(roster, 0) == MemberState.RUNNING and roster.table.epoch == 1
    assert 0 in roster.health.last_report


def test_the_view_comes_with_its_members_handles_only():
    roster = started(3)
    roster.mark_dead(1)
    view, handles = roster.view_with_handles()
    assert view.members == (0, 2) and handles == {0: roster.handles[0], 2: roster.handles[2]}


def test_a_restore_replaces_table_handles_and_health_in_one_call(tmp_path):
    """The coordinator's parts hold the roster: a restore must change what they read, not a
    copy they no longer look at."""
    saved = started()
    saved.reported(0, 4)
    saved.go_offline(2, due_back_s=1.5)
    record = saved.table.to_record()
    roster = Roster()
    roster.register(7, ScriptedClient(7), "node")
    roster.start(7)
    roster.suspect(7)
    part = RingChanges(config_from_dict({}), roster, Results(HistoryLog(tmp_path / "h.jsonl")))
    roster.restore(record, hung=[3], healing=[(0.5, 2)])
    assert part.roster.table.to_record() == record
    assert part.roster.table.order == [0, 1, 2, 3] and part.roster.table.offline == [2]
    assert part.entry_round() == 6  # from the restored table's newest round, 4
    assert roster.handles == {}  # found again, each member's actor, after a restart
    assert roster.health.hung == {3} and roster.health.healing == [(0.5, 2)]
    assert not roster.health.suspects and not roster.health.last_report
    roster.reconnect(0, handle := ScriptedClient(0))
    assert roster.handles == {0: handle} and 0 in roster.health.last_report
