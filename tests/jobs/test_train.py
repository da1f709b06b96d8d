"""The command line: a real run end to end, and config errors caught before Ray starts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.train import main
from tests.conftest import DATA_ROOT, needs_data

REPO = Path(__file__).resolve().parents[2]


def test_bad_override_names_the_key_and_exits_before_ray(capsys):
    assert main(["clients.count=many"]) == 2
    err = capsys.readouterr().err
    assert "clients.count" in err and "integer" in err
    assert "ray" not in sys.modules or not __import__("ray").is_initialized()


def test_unknown_key_lists_the_allowed_ones(capsys):
    assert main(["schedule.mood=sync"]) == 2
    err = capsys.readouterr().err
    assert "schedule.mood" in err and "mode" in err and "hop_timeout_s" in err


@needs_data
@pytest.mark.slow
def test_train_runs_end_to_end_and_prints_the_table(tmp_path):
    out = tmp_path / "run"
    command = [
        sys.executable,
        "-m",
        "jobs.train",
        "--no-progress",
        "--output-dir",
        str(out),
        "experiment.rounds=2",
        "clients.count=3",
        "data.max_train_per_client=200",
        f"data.root={DATA_ROOT}",
        "eval.global_max_samples=300",
        "algorithm.name=dfedavg",
        f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
    ]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Local-T" in done.stdout and "Global-T" in done.stdout
    assert f"outputs: {out}" in done.stdout
    assert "cluster: 1 node(s)" in done.stderr and "clients [0, 1, 2]" in done.stderr  # at launch
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rounds_completed"] == 2 and summary["clients"] == 3
    for name in ("config.yaml", "metrics.parquet", "events.parquet"):
        assert (out / name).is_file()
