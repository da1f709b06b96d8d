"""The command line: a real run end to end, and config errors caught before Ray starts."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import jobs.train
from jobs.train import main
from ring_actors.config import load_config
from tests.conftest import DATA_ROOT, UNTRACKED, fresh_store, needs_data

REPO = Path(__file__).resolve().parents[2]
RING8 = REPO / "jobs" / "configs" / "ring8-drdfl.yaml"


def test_bad_override_names_the_key_and_exits_before_ray(capsys, no_ray):
    assert main(["clients.count=many"]) == 2
    err = capsys.readouterr().err
    assert "clients.count" in err and "integer" in err
    assert "ray" not in sys.modules or not __import__("ray").is_initialized()


def test_unknown_key_lists_the_allowed_ones(capsys):
    assert main(["schedule.mood=sync"]) == 2
    err = capsys.readouterr().err
    assert "schedule.mood" in err and "mode" in err and "hop_timeout_s" in err


@pytest.mark.parametrize("stopped", ["interrupted", None])
def test_ctrl_c_while_the_outcome_prints_ends_with_one_message(
    stopped, tmp_path, capsys, monkeypatch
):
    def interrupted(summary: dict, baseline: Path | None = None) -> str:
        raise KeyboardInterrupt  # a second Ctrl-C lands as the table is drawn

    monkeypatch.setattr(jobs.train, "format_table", interrupted)
    summary = {"stopped": stopped, "output_dir": str(tmp_path)}
    assert jobs.train.report(summary, load_config()) == jobs.train.INTERRUPTED
    lines = capsys.readouterr().err.splitlines()
    assert lines == [f"run stopped: {stopped + '; ' if stopped else ''}outputs in {tmp_path}"]


@needs_data
@pytest.mark.slow
def test_train_runs_end_to_end_and_prints_the_table(tmp_path):
    out = tmp_path / "run"
    command = [
        sys.executable,
        "-m",
        "jobs.train",
        "--no-progress",
        "--config",
        str(RING8),  # the full Fashion-MNIST, shard splits of 2 classes, sync, no faults
        "--output-dir",
        str(out),
        "experiment.rounds=2",
        "clients.count=3",
        "data.max_train_per_client=200",
        f"data.root={DATA_ROOT}",
        "eval.global_max_samples=300",
        "eval.local_max_samples=200",
        "algorithm.name=dfedavg",
        f"tracking.uri={fresh_store(tmp_path / 'mlflow.db')}",
        *UNTRACKED,
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


def written_summary(run_dir: Path) -> dict:
    """The run's summary as it stands ({} before it exists)."""
    try:
        return json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):  # not written yet, or caught halfway through a rewrite
        return {}


@needs_data
@pytest.mark.slow
def test_ctrl_c_writes_what_exists_and_resume_finishes_the_run(tmp_path):
    out = tmp_path / "run"
    setting = [
        "experiment.rounds=6",
        "clients.count=3",
        "data.max_train_per_client=200",
        f"data.root={DATA_ROOT}",
        "eval.global_max_samples=300",
        "eval.local_max_samples=200",
        "algorithm.name=dfedavg",
        "eval.every=1",
        "faults=[{at_round: 0, slow: [0, 1, 2], delay_s: 2.5}]",  # a run long past its first write
        f"tracking.uri={fresh_store(tmp_path / 'mlflow.db')}",
    ]
    command = [sys.executable, "-m", "jobs.train", "--no-progress", "--config", str(RING8)]
    command += ["--output-dir", str(out)]
    # Started from a background job (CI, `pytest &`), this process ignores SIGINT and a child
    # would inherit that; a handled signal is reset to the default in the child, as a
    # terminal's foreground driver has it.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        driver = subprocess.Popen(
            [*command, *setting],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    finally:
        signal.signal(signal.SIGINT, previous)
    deadline = time.monotonic() + 300
    # A whole round is in the outputs: press Ctrl-C. The coordinator writes a round every
    # member reported at its next pass, so it shows while five slowed rounds are still to go.
    while written_summary(out).get("rounds_completed", 0) < 1:
        assert time.monotonic() < deadline and driver.poll() is None
        time.sleep(0.2)
    first = written_summary(out)
    assert first["partial"], f"the first whole round came only with the final outputs: {first}"
    driver.send_signal(signal.SIGINT)
    stdout, stderr = driver.communicate(timeout=180)
    assert driver.returncode == 130, stderr[-3000:]  # 128 + SIGINT, as a shell has it
    assert f"--resume {out}" in stderr and "run stopped: interrupted" in stderr
    cut = json.loads((out / "summary.json").read_text())
    assert 1 <= cut["rounds_completed"] < 6
    rows = pq.read_table(out / "metrics.parquet").to_pylist()
    assert {r["round"] for r in rows} >= set(range(cut["rounds_completed"]))

    done = subprocess.run(
        [sys.executable, "-m", "jobs.train", "--no-progress", "--resume", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert (
        summary["rounds_completed"] == 6 and summary["mlflow"]["run_id"] == cut["mlflow"]["run_id"]
    )
    rows = pq.read_table(out / "metrics.parquet").to_pylist()
    assert sorted((r["client"], r["round"]) for r in rows) == [
        (c, r) for c in range(3) for r in range(6)
    ]
