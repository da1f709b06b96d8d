"""The coordinator's own failure and a client restarted by Ray, on real actors."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from mlflow.tracking import MlflowClient

from ring_actors.runtime.driver import run_experiment
from tests.conftest import TRACKED, needs_data, small_config

pytestmark = [needs_data, pytest.mark.slow]


def test_killed_coordinator_is_restarted_and_the_results_are_complete(ray_local, tmp_path):
    config = small_config(
        tmp_path,
        "clients.count=3",
        "experiment.rounds=5",
        "faults=[{at_round: 1, kill_coordinator: true}]",
        *TRACKED,
    )
    out = tmp_path / "out"
    summary = run_experiment(config, out, progress=False)
    assert summary["rounds_completed"] == 5
    assert summary["ring_order"] == [0, 1, 2]
    assert summary["events"]["lost_payloads"] == 0
    events = pq.read_table(out / "events.parquet").to_pylist()
    assert [e["kind"] for e in events].count("coordinator_restored") == 1
    rows = pq.read_table(out / "metrics.parquet").to_pylist()
    assert sorted((r["client"], r["round"]) for r in rows) == [
        (c, r) for c in range(3) for r in range(5)
    ]  # nothing reported while it was down is missing
    history = MlflowClient(summary["mlflow"]["tracking_uri"]).get_metric_history(
        summary["mlflow"]["run_id"], "local_acc_mean"
    )
    assert sorted({m.step for m in history}) == list(range(5))  # one MLflow run throughout


def test_crashed_client_restarted_by_ray_resumes_from_its_checkpoint(ray_local, tmp_path):
    config = small_config(
        tmp_path,
        "clients.count=3",
        "clients.max_restarts=1",
        "experiment.rounds=8",
        "schedule.hop_timeout_s=8",
        "schedule.heartbeat_s=0.5",
        # Slow rounds, so that the restarted process is back while the ring still runs.
        "faults=[{at_round: 2, crash: [1]}, {at_round: 0, slow: [0, 1, 2], delay_s: 1.5}]",
    )
    out = tmp_path / "out"
    summary = run_experiment(config, out, progress=False)
    assert summary["rounds_completed"] == 8
    assert sorted(summary["ring_order"]) == [0, 1, 2]  # back in the ring
    counts = summary["events"]
    assert counts["crashes"] == 1 and counts["lost_payloads"] == 0
    # A loaded machine may stall a slowed member past the hop timeout: bypassed as hung, it
    # comes back with its next report, one rejoin more for each.
    assert counts["rejoins"] == 1 + counts["hangs"]
    events = pq.read_table(out / "events.parquet").to_pylist()
    (rejoin,) = [e for e in events if e["kind"] == "rejoin" and "from round" in e["detail"]]
    assert rejoin["client"] == 1 and "from round 1" in rejoin["detail"]
    rounds = {
        r["round"] for r in pq.read_table(out / "metrics.parquet").to_pylist() if r["client"] == 1
    }
    # Before the crash (round 1's report is replayed from the checkpoint if the crash cut
    # it off), and to the end after the rejoin.
    assert {0, 1, 7} <= rounds
