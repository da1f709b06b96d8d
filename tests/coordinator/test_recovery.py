"""A restarted coordinator's run clock: the time it was down is the run's time when Ray
restarted it mid-run (its clients trained on), not when a stopped run is resumed later."""

from __future__ import annotations

import time

from ring_actors.coordinator.core import CoordinatorCore
from ring_actors.coordinator.tracking import Tracker
from ring_actors.delivery.event_kinds import EventKind
from tests.helpers.scripted_clients import ScriptedClient, make

DOWN_S = 1.0


def restarted_after_downtime(tmp_path, adopt_clients: bool) -> tuple[float, float]:
    """The run's clock as checkpointed, and as the coordinator restored after ``DOWN_S``."""
    core, handles = make(tmp_path)
    time.sleep(0.2)
    saved = core.run_elapsed_s()
    core.checkpoint(force=True)
    time.sleep(DOWN_S)
    restarted = CoordinatorCore(core.config, tmp_path, Tracker("unused", "t", "run"), handles.get)
    assert restarted.restore(adopt_clients=adopt_clients)
    return saved, restarted.run_elapsed_s()


def test_a_coordinator_restarted_mid_run_counts_its_downtime(tmp_path):
    """Clients' budgets and off periods run on this clock: losing the downtime would give
    every client that much more budget than the run's."""
    saved, restored = restarted_after_downtime(tmp_path, adopt_clients=True)
    assert restored >= saved + DOWN_S


def test_a_resumed_run_goes_on_from_where_its_clock_stopped(tmp_path):
    saved, restored = restarted_after_downtime(tmp_path, adopt_clients=False)
    assert saved <= restored < saved + DOWN_S / 2


def test_a_resumed_run_restarts_the_loops_of_members_away_or_bypassed_as_hung(tmp_path):
    """Client 1 offline (due back later) and client 2 bypassed as hung when the driver died:
    each new actor's loop must start, or it never comes back and the run never ends."""
    core, handles = make(tmp_path)
    core.leave(1, 0, 40.0)
    core.changes.mark_dead(2, EventKind.HANG, "overdue")
    core.checkpoint(force=True)
    fresh = {c: ScriptedClient(c) for c in range(3)}
    resumed = CoordinatorCore(core.config, tmp_path, Tracker("unused", "t", "run"), fresh.get)
    assert resumed.restore(adopt_clients=False)
    for client_id, handle in fresh.items():
        assert resumed.adopt(client_id, handle, "node")
    resumed.resume_run()
    assert [fresh[c].resumed for c in range(3)] == [1, 1, 1]
    assert resumed.table.offline == [1]
    assert fresh[1].views == [] and fresh[2].views == []  # in no view until back
    resumed.come_back(1, 0)
    resumed.report_round(2, 1, {"loss": 1.0})  # a late report splices it in again
    assert sorted(resumed.table.live) == [0, 1, 2]


def test_a_resumed_run_restores_every_live_member_at_the_newest_round_all_of_them_hold(
    tmp_path,
):
    """Client 2 was cut before its checkpoint of round 7 was on disk and holds round 5's
    alone: the others go back to round 3, and every member drops what a peer sent after the
    round it restarts from, which that peer sends again."""
    core, _ = make(tmp_path)
    core.checkpoint(force=True)
    fresh = {c: ScriptedClient(c) for c in range(3)}
    fresh[0].checkpoints, fresh[1].checkpoints, fresh[2].checkpoints = (3, 7), (3, 7), (5,)
    resumed = CoordinatorCore(core.config, tmp_path, Tracker("unused", "t", "run"), fresh.get)
    assert resumed.restore(adopt_clients=False)
    for client_id, handle in fresh.items():
        assert resumed.adopt(client_id, handle, "node")
    resumed.resume_run()
    assert [fresh[c].restored_at_most for c in range(3)] == [[5], [5], [5]]
    assert all(fresh[c].restarts == {0: 3, 1: 3, 2: 5} for c in range(3))
    assert [fresh[c].resumed for c in range(3)] == [1, 1, 1]
