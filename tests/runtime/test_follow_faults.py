"""A resumed run applies each driver-side fault entry once, even from a run folder with no
driver_faults.json (written before there was one, or lost): its events say what was applied."""

from __future__ import annotations

from pathlib import Path

from ring_actors.config import Config, config_from_dict
from ring_actors.coordinator.output_files import write_outputs
from ring_actors.delivery.event_kinds import EventKind
from ring_actors.faults.driver_side import driver_faults_due
from ring_actors.runtime.experiment import Experiment
from ring_actors.runtime.follow import applied_faults
from ring_actors.storage.run_folder import RunFolder
from tests.helpers.in_process_ring import ring


def resumed(config: Config, output_dir: Path) -> Experiment:
    """A resumed run as the driver holds it, before any actor is asked anything."""
    return Experiment(config, output_dir, None, {}, {}, {}, None, [], None, "run", resume=True)


def test_a_join_recorded_only_in_the_events_is_not_applied_again(tmp_path):
    run = ring(tmp_path, count=3, reserve=1, rounds=4, faults=[{"at_round": 2, "join": 1}])
    run.run(timeout_s=60)
    folder = RunFolder(tmp_path)
    assert run.faults_applied.entries == {0: (3,)}
    folder.driver_faults.unlink()  # a run folder of a version before the file
    applied = applied_faults(resumed(run.config, tmp_path))
    assert applied.entries == {0: (3,)}
    assert driver_faults_due(run.config.faults, 4, 4, set(applied.entries)) == []
    assert folder.driver_faults.exists()  # a later resume reads it back


def event(kind: EventKind, client: int = -1, round_: int = -1) -> dict:
    return {"time_s": 1.0, "kind": kind.value, "client": client, "round": round_, "epoch": 1,
            "detail": ""}  # fmt: skip


def test_kills_and_joins_whose_effects_the_events_record_count_as_applied(tmp_path):
    plan = [
        {"at_round": 1, "crash": [2]},  # the client strikes it itself: never the driver's
        {"at_round": 3, "join": 1},
        {"at_round": 2, "kill_coordinator": True},
        {"at_round": 5, "kill_node": [1]},
        {"at_round": 6, "kill_node": [0]},  # client 0 never died: not applied yet
        {"at_round": 7, "kill_coordinator": True},  # one restore was a resume's
        {"at_round": 8, "join": 2},
    ]
    config = config_from_dict({"clients": {"count": 4}, "faults": plan})
    events = [
        event(EventKind.CRASH, 2, 0),
        event(EventKind.COORDINATOR_RESTORED),  # the kill at round 2
        event(EventKind.JOIN, 4, 3),
        event(EventKind.COORDINATOR_RESTORED),  # a resumed run's, which says so:
        event(EventKind.RUN_RESUMED),
        event(EventKind.CRASH, 0, 2),  # before the kill of its node was due
        event(EventKind.CRASH, 1, 4),  # its node's kill, at round 5
    ]
    write_outputs(tmp_path, {}, {}, [], events)  # the events table, as a run writes it
    applied = applied_faults(resumed(config, tmp_path))
    assert applied.entries == {1: (4,), 2: (), 3: ()}
    assert driver_faults_due(config.faults, 9, 9, set(applied.entries)) == [4, 5, 6]
