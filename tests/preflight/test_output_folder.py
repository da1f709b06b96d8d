"""The run folder's checks, without Ray: portable names, a used folder, what may be resumed."""

from __future__ import annotations

import json
import time

import pytest
import yaml

from ring_actors.config import config_from_dict, load_config
from ring_actors.coordinator.tracking import Tracker
from ring_actors.in_process import InProcessRing
from ring_actors.preflight.output_folder import (
    CHECKPOINT,
    RunFolderError,
    check_new,
    check_resumable,
    portable,
    remove_unstarted,
    resume_config,
)
from tests.helpers.in_process_ring import CLASSES, SHAPE, client_data


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("qs-examples.fedprox:FedProx-20260101-1200", "qs-examples.fedprox-FedProx-20260101-1200"),
        ("a b/c", "a-b-c"),
        (":", "run"),
    ],
)  # fmt: skip
def test_portable_names_keep_only_letters_digits_dot_dash_underscore(name, expected):
    assert portable(name) == expected


def saved_run(tmp_path, rounds_done: int, partial: bool = False):
    run = tmp_path / "run"
    run.mkdir()
    config = load_config(None, ["experiment.rounds=2", "algorithm.name=drdfl"])
    (run / "config.yaml").write_text(yaml.safe_dump(config.to_dict(), sort_keys=False))
    (run / CHECKPOINT).write_text("{}")
    summary = {"rounds_completed": rounds_done, "partial": partial, "stopped": None}
    (run / "summary.json").write_text(json.dumps(summary))
    return run


def test_a_folder_holding_a_run_is_no_new_output_dir(tmp_path):
    run = saved_run(tmp_path, 2)
    with pytest.raises(RunFolderError, match="already holds a run.*--resume"):
        check_new(run)
    check_new(tmp_path / "fresh")


def test_resume_refuses_a_finished_run_and_takes_an_interrupted_one(tmp_path):
    run = saved_run(tmp_path, 2)
    with pytest.raises(RunFolderError, match="the run finished"):
        resume_config(run, [])
    (run / "summary.json").write_text(json.dumps({"rounds_completed": 1, "partial": False}))
    assert resume_config(run, ["ray.address=auto"]).ray.address == "auto"


def test_resume_names_every_override_that_contradicts_the_run(tmp_path):
    run = saved_run(tmp_path, 1)
    overrides = ["algorithm.name=fedavg", "experiment.rounds=2", "clients.count=4"]
    with pytest.raises(RunFolderError) as err:
        resume_config(run, overrides)
    message = str(err.value)
    assert "algorithm.name" in message and "clients.count" in message
    assert "experiment.rounds" not in message  # the run's own value


def test_a_failed_launch_removes_only_what_it_wrote(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("the user's")
    (mine / "config.yaml").write_text("{}")
    (mine / "clients").mkdir()
    remove_unstarted(mine, created=False)
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
    remove_unstarted(mine, created=True)
    assert not mine.exists()


def two_clients(tmp_path, experiment: dict, faults=(), **schedule) -> InProcessRing:
    config = config_from_dict(
        {
            "experiment": experiment,
            "clients": {"count": 2, "batch_size": 16},
            "schedule": {"hop_timeout_s": 0.5, "heartbeat_s": 0.1, **schedule},
            "faults": list(faults),
        }
    )
    return InProcessRing(config, client_data(2), CLASSES, SHAPE, tmp_path / "run")


def finalized(ring: InProcessRing, mlflow_uri: str) -> dict:
    """The final outputs, written as the driver has the coordinator write them at the end
    (and on Ctrl-C): ``summary.json`` among them."""
    ring.coordinator.outputs.tracker = Tracker(mlflow_uri, "t", "run")  # a real store
    return ring.coordinator.finalize(1.0)


def join_clients(ring: InProcessRing) -> None:
    """Wait out the clients' round loops (a time budget ends those a stop leaves running),
    so that none trains on past the test."""
    for client in ring.clients.values():
        if client.core.thread is not None:
            client.core.thread.join(60)


ENDINGS = {  # how the run ends, and what the refusal then says
    "rounds": ({"rounds": 2}, {}, "all 2 of its 2 rounds"),
    "time_budget": ({"rounds": 10_000, "time_budget_s": 1.0}, {}, "experiment.time_budget_s"),
    "stopped": (  # the budget only bounds how long client 1 trains on after the stop
        {"rounds": 10_000, "time_budget_s": 2.0},
        {"faults": [{"at_round": 1, "error": [0]}], "on_client_error": "stop"},
        "client 0 failed in round 1",
    ),
}


@pytest.mark.parametrize("ending", sorted(ENDINGS))
def test_resume_refuses_a_run_that_ended_whatever_ended_it(tmp_path, mlflow_uri, ending):
    experiment, settings, why = ENDINGS[ending]
    ring = two_clients(tmp_path, experiment, **settings)
    ring.run(timeout_s=120)
    summary = finalized(ring, mlflow_uri)
    join_clients(ring)
    with pytest.raises(RunFolderError, match="the run finished") as refused:
        check_resumable(tmp_path / "run", experiment["rounds"])
    assert why in str(refused.value) and "--output-dir" in str(refused.value)
    assert summary["ended_because"] == ending


@pytest.mark.slow
def test_a_run_cut_short_stays_resumable_before_and_after_its_last_outputs(tmp_path, mlflow_uri):
    # Rounds of a second (asleep) from round 1 on: the clients are mid-run when it is cut
    # short, and their budget ends the round loops that go on after it.
    slow = {"at_round": 1, "slow": [0, 1], "delay_s": 1.0}
    ring = two_clients(tmp_path, {"rounds": 10_000, "time_budget_s": 8.0}, faults=[slow])
    run = tmp_path / "run"
    ring.start()
    try:
        deadline = time.monotonic() + 120
        while not (run / "summary.json").exists() or not (run / CHECKPOINT).exists():
            assert time.monotonic() < deadline, "the run wrote no outputs"
            time.sleep(0.05)
        ring.close()  # the driver was killed: only the outputs written while it ran
        assert json.loads((run / "summary.json").read_text())["partial"] is True
        check_resumable(run, 10_000)
        with ring.coordinator.lock:  # no client reports meanwhile: the run is still going on
            assert not ring.coordinator.progress().finished
            summary = finalized(ring, mlflow_uri)  # Ctrl-C: the driver has what exists written
        assert summary["partial"] is False and summary["ended_because"] is None
        assert resume_config(run, []).experiment.rounds == 10_000
    finally:
        join_clients(ring)
