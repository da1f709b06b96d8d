"""Tracking: URI resolution, param flattening, batched MLflow writes off the caller's thread,
what stays out of the upload, the output files."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pyarrow.parquet as pq
import pytest
import yaml
from mlflow.tracking import MlflowClient

from ring_actors.coordinator.output_files import write_outputs
from ring_actors.coordinator.tracking import (
    Retry,
    Tracker,
    flatten,
    resolve_tracking_uri,
)
from ring_actors.storage.run_folder import RunFolder


def test_tracking_uri_prefers_config_then_env_then_sqlite_in_workdir(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000")
    assert resolve_tracking_uri("sqlite:///x.db", tmp_path) == "sqlite:///x.db"
    assert resolve_tracking_uri(None, tmp_path) == "http://127.0.0.1:5000"
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    assert resolve_tracking_uri(None, tmp_path) == f"sqlite:///{tmp_path / 'mlflow.db'}"


def test_flatten_gives_dotted_string_params():
    flat = flatten({"a": {"b": 1, "c": {"d": None}}, "faults": [{"at_round": 1}]})
    assert flat == {"a.b": "1", "a.c.d": "None", "faults": '[{"at_round": 1}]'}


def test_tracker_batches_more_metrics_than_one_call_takes(mlflow_uri):
    tracker = Tracker(mlflow_uri, "exp", "run")
    for step in range(1200):  # over MLflow's 1000-metric batch limit
        tracker.add_metrics({"loss": 1.0 / (step + 1)}, step)
    assert not tracker.flush()  # not open yet: the metrics wait in the buffer
    assert tracker.run_id is None and len(tracker._pending) == 1200
    assert tracker.open({"x": "1"}, {"kind": "test"})
    assert tracker.end() is None  # everything sent: no unsent file
    client = MlflowClient(tracker.uri)
    history = client.get_metric_history(tracker.run_id, "loss")
    assert len(history) == 1200
    assert client.get_run(tracker.run_id).info.status == "FINISHED"
    assert client.get_run(tracker.run_id).data.params == {"x": "1"}
    assert client.get_run(tracker.run_id).data.tags["kind"] == "test"


def test_a_reopened_run_is_the_same_run(mlflow_uri):
    uri = mlflow_uri
    first = Tracker(uri, "exp", "run")
    assert first.open({"x": "1"})
    again = Tracker(uri, "exp", "run", run_id=first.run_id)
    again.add_metrics({"loss": 0.5}, 3)
    again.end()
    assert again.run_id == first.run_id
    assert [m.step for m in MlflowClient(uri).get_metric_history(first.run_id, "loss")] == [3]


def test_metrics_mlflow_refuses_go_to_the_unsent_file_and_the_run_still_ends(tmp_path, mlflow_uri):
    uri = mlflow_uri
    tracker = Tracker(uri, "exp", "run", output_dir=tmp_path)
    tracker.open()
    tracker.add_metrics({"loss": 0.5}, 0)
    assert tracker.flush(wait_s=30)
    # A name MLflow rejects: resending cannot help. Its batch goes to the file entire.
    tracker.add_metrics({"a/../b": 1.0, "loss": 0.25}, 1)
    assert tracker.end() == RunFolder(tmp_path).unsent_metrics
    rows = [
        json.loads(line) for line in RunFolder(tmp_path).unsent_metrics.read_text().splitlines()
    ]
    sent = MlflowClient(uri).get_metric_history(tracker.run_id, "loss")
    assert sorted((r["key"], r["step"]) for r in rows) == [("a/../b", 1), ("loss", 1)]
    assert all(r["run_id"] == tracker.run_id for r in rows)
    assert [m.step for m in sent] == [0]
    assert MlflowClient(uri).get_run(tracker.run_id).info.status == "FINISHED"


def test_a_dead_server_never_blocks_the_caller_and_end_keeps_every_metric(tmp_path):
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    retry = Retry(close_s=0.5, request_timeout_s=2)
    tracker = Tracker(f"http://127.0.0.1:{port}", "exp", "run", output_dir=tmp_path, retry=retry)
    assert not tracker.open({"x": "1"})  # the first try failed; the writer keeps trying
    started = time.monotonic()
    for step in range(500):
        tracker.add_metrics({"loss": 1.0 / (step + 1), "acc": step / 500}, step)
    assert not tracker.flush()  # never raises
    assert time.monotonic() - started < 1.0
    started = time.monotonic()
    assert tracker.end() == RunFolder(tmp_path).unsent_metrics
    assert time.monotonic() - started < retry.close_s + 10
    rows = [
        json.loads(line) for line in RunFolder(tmp_path).unsent_metrics.read_text().splitlines()
    ]
    assert sorted((r["key"], r["step"]) for r in rows) == sorted(
        (key, step) for step in range(500) for key in ("loss", "acc")
    )
    assert tracker.run_id is None and all(r["run_id"] is None for r in rows)


def test_without_mlflow_installed_end_writes_the_unsent_file_at_once(tmp_path):
    """A missing MLflow is not an outage that retrying can end: the metrics go to the
    unsent file when the run ends, without the close's retry window."""
    code = (
        "import sys, time; sys.modules['mlflow'] = None\n"  # as if it were not installed
        "from pathlib import Path\n"
        "from ring_actors.coordinator.tracking import Tracker\n"
        f"folder = Path({str(tmp_path)!r})\n"
        "tracker = Tracker(f'sqlite:///{folder}/m.db', 'exp', 'run', output_dir=folder)\n"
        "tracker.open()\n"
        "tracker.add_metrics({'loss': 0.5}, 0)\n"
        "started = time.monotonic()\n"
        "print(tracker.end(), time.monotonic() - started)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    path, took = done.stdout.split()
    assert path == str(RunFolder(tmp_path).unsent_metrics)
    assert float(took) < 5.0, done.stderr
    rows = [
        json.loads(line) for line in RunFolder(tmp_path).unsent_metrics.read_text().splitlines()
    ]
    assert [(r["key"], r["value"], r["step"]) for r in rows] == [("loss", 0.5, 0)]
    assert "not installed" in done.stderr


def test_checkpoints_stay_out_of_the_upload(tmp_path, mlflow_uri):
    """The layout a run leaves: clients' checkpoints under clients/, the coordinator's
    record (and an interrupted write of it) next to the contract files."""
    out = tmp_path / "run"
    write_outputs(out, {"experiment": {"rounds": 1}}, {"wall_s": 1.0}, [], [])
    (out / "clients").mkdir()
    (out / "clients" / "client-0.pt").write_bytes(b"private model")
    (out / "coordinator.json").write_text("{}")
    (out / "coordinator.json.tmp").write_text("{")
    uri = mlflow_uri
    tracker = Tracker(uri, "exp", "run")
    tracker.log_artifacts(out, RunFolder.PRIVATE)
    tracker.end()
    uploaded = {a.path for a in MlflowClient(uri).list_artifacts(tracker.run_id)}
    assert uploaded == {"config.yaml", "summary.json", "metrics.parquet", "events.parquet"}


def test_write_outputs_follows_the_contract(tmp_path):
    metrics = [
        {"client": 0, "round": 0, "time_s": 1.0, "local_acc": 0.5},
        {"client": 1, "round": 0, "time_s": 1.2, "local_acc": 0.7, "global_acc": 0.3},
    ]
    write_outputs(tmp_path, {"experiment": {"rounds": 1}}, {"wall_s": 2.0}, metrics, [])
    assert yaml.safe_load((tmp_path / "config.yaml").read_text()) == {"experiment": {"rounds": 1}}
    assert json.loads((tmp_path / "summary.json").read_text()) == {"wall_s": 2.0}
    table = pq.read_table(tmp_path / "metrics.parquet")
    assert table.column_names == ["client", "round", "time_s", "global_acc", "local_acc"]
    assert table.column("global_acc").to_pylist() == [None, 0.3]
    events = pq.read_table(tmp_path / "events.parquet")
    assert events.num_rows == 0 and "kind" in events.column_names


@pytest.mark.slow
def test_a_store_whose_creation_was_killed_halfway_still_opens(tmp_path):
    """MLflow builds a new SQLite store table by table; a coordinator killed meanwhile
    must not leave a file the restarted one cannot open."""
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    code = (
        "from ring_actors.coordinator.tracking import create_sqlite_store; "
        f"create_sqlite_store({uri!r})"
    )
    creating = subprocess.Popen([sys.executable, "-c", code])
    deadline = time.monotonic() + 60
    while not any(f.stat().st_size for f in tmp_path.iterdir()) and creating.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.005)
    time.sleep(0.5)  # the first tables are written; the rest take about a second more
    creating.kill()
    creating.wait()
    tracker = Tracker(uri, "exp", "run", output_dir=tmp_path)
    assert tracker.open()
    tracker.add_metrics({"loss": 0.5}, 0)
    assert tracker.end() is None
    assert [m.value for m in MlflowClient(uri).get_metric_history(tracker.run_id, "loss")] == [0.5]
