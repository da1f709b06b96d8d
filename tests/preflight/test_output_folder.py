"""The run folder's checks, without Ray: portable names, a used folder, what may be resumed."""

from __future__ import annotations

import json

import pytest
import yaml

from ring_actors.config import load_config
from ring_actors.preflight.output_folder import (
    CHECKPOINT,
    RunFolderError,
    check_new,
    portable,
    remove_unstarted,
    resume_config,
)


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
