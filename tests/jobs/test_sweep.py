"""Sweeps: a grid of runs on one Ray, each its own MLflow run under one parent, re-runs skip
what finished."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

from jobs.sweep import SWEEP_FILE, expand, finished, main, parent_run, plan
from tests.conftest import TRACKED, needs_data, small_config


def write_cell(tmp_path: Path) -> Path:
    """A tiny setting: 3 clients of Fashion-MNIST, one round."""
    config = small_config(
        tmp_path,
        "experiment.name=sweep-test",
        "experiment.rounds=1",
        "clients.count=3",
        "data.max_train_per_client=100",
        "algorithm.name=local",
        "eval.global_max_samples=200",
        "eval.local_max_samples=200",
        *TRACKED,
    )
    path = tmp_path / "cell.yaml"
    path.write_text(yaml.safe_dump(config.to_dict()))
    return path


def test_axes_split_at_top_level_commas_only():
    grid = expand(["algorithm.name=local,fedavg", "experiment.seed=0,1", "faults=[{at_round: 1}]"])
    assert len(grid) == 4
    assert grid[0] == ('algorithm.name="local"', "experiment.seed=0", 'faults=[{"at_round": 1}]')
    assert grid[3][:2] == ('algorithm.name="fedavg"', "experiment.seed=1")


def test_every_point_is_validated_before_anything_runs(tmp_path, capsys):
    cell = write_cell(tmp_path)
    code = main(
        ["--config", str(cell), "--output-dir", str(tmp_path / "s"), "algorithm.name=local,nope"]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert 'algorithm.name="nope"' in err and "algorithm.name" in err
    assert not (tmp_path / "s").exists()


def test_points_are_named_after_what_varies(tmp_path):
    cell = write_cell(tmp_path)
    points = plan(cell, ["algorithm.name=local,fedavg", "clients.count=3"], tmp_path)
    assert [p.output_dir.name for p in points] == ["algorithm.name=local", "algorithm.name=fedavg"]
    assert [p.config.algorithm.name for p in points] == ["local", "fedavg"]


def test_a_sweep_of_untracked_runs_has_no_parent_run(tmp_path):
    points = plan(write_cell(tmp_path), ["tracking.enabled=false", "experiment.seed=0,1"], tmp_path)
    assert parent_run(points, tmp_path / "s") is None
    assert not (tmp_path / "s" / SWEEP_FILE).exists()
    mixed = plan(write_cell(tmp_path), ["tracking.enabled=false,true"], tmp_path)
    assert parent_run(mixed, tmp_path / "s") is not None  # one tracked point has one


@needs_data
@pytest.mark.slow
def test_a_sweep_runs_its_grid_under_one_parent_and_a_rerun_skips_it(ray_local, tmp_path, capsys):
    cell = write_cell(tmp_path)
    sweep = tmp_path / "sweep"
    argv = [
        "--config",
        str(cell),
        "--output-dir",
        str(sweep),
        "--no-progress",
        "algorithm.name=local,fedavg",
    ]
    assert main(argv) == 0
    runs = {
        p.name: json.loads((p / "summary.json").read_text()) for p in sweep.iterdir() if p.is_dir()
    }
    assert set(runs) == {"algorithm.name=local", "algorithm.name=fedavg"}
    assert {s["algorithm"] for s in runs.values()} == {"local", "fedavg"}
    parent = json.loads((sweep / "sweep.json").read_text())["parent_run_id"]
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    for summary in runs.values():
        tags = client.get_run(summary["mlflow"]["run_id"]).data.tags
        assert tags["mlflow.parentRunId"] == parent
    stamps = {p: (p / "summary.json").stat().st_mtime for p in sweep.iterdir() if p.is_dir()}
    capsys.readouterr()
    assert main(argv) == 0
    assert f"sweep: 2 runs in {sweep}, 2 already finished" in capsys.readouterr().out
    assert {p: (p / "summary.json").stat().st_mtime for p in stamps} == stamps
    # A key that does not vary is not in the directory names: a change of it is refused.
    assert main([*argv, "experiment.rounds=2"]) == 2
    assert "holds a run of another config" in capsys.readouterr().err


def test_a_torn_summary_counts_as_a_point_not_finished(tmp_path):
    cell = write_cell(tmp_path)
    (point,) = plan(cell, ["clients.count=3"], tmp_path / "s")
    point.output_dir.mkdir(parents=True)
    (point.output_dir / "summary.json").write_text('{"rounds_completed": 1, "par')
    assert not finished(point)  # it raised JSONDecodeError, outside the sweep's try
