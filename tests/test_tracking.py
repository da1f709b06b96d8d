"""Tracking: URI resolution, param flattening, batched MLflow writes, the output files."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import yaml
from mlflow.tracking import MlflowClient

from ring_actors.tracking import Tracker, flatten, resolve_tracking_uri, write_outputs


def test_tracking_uri_prefers_config_then_env_then_sqlite_in_workdir(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000")
    assert resolve_tracking_uri("sqlite:///x.db", tmp_path) == "sqlite:///x.db"
    assert resolve_tracking_uri(None, tmp_path) == "http://127.0.0.1:5000"
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    assert resolve_tracking_uri(None, tmp_path) == f"sqlite:///{tmp_path / 'mlflow.db'}"


def test_flatten_gives_dotted_string_params():
    flat = flatten({"a": {"b": 1, "c": {"d": None}}, "faults": [{"at_round": 1}]})
    assert flat == {"a.b": "1", "a.c.d": "None", "faults": '[{"at_round": 1}]'}


def test_tracker_batches_more_metrics_than_one_call_takes(tmp_path):
    tracker = Tracker(f"sqlite:///{tmp_path / 'm.db'}", "exp", "run")
    for step in range(1200):  # over MLflow's 1000-metric batch limit
        tracker.add_metrics({"loss": 1.0 / (step + 1)}, step)
    tracker.flush()  # not open yet: the metrics wait in the buffer
    assert tracker.run_id is None and len(tracker._pending) == 1200
    tracker.open({"x": "1"}, {"kind": "test"})
    tracker.end()
    client = MlflowClient(tracker.uri)
    history = client.get_metric_history(tracker.run_id, "loss")
    assert len(history) == 1200
    assert client.get_run(tracker.run_id).info.status == "FINISHED"
    assert client.get_run(tracker.run_id).data.params == {"x": "1"}
    assert client.get_run(tracker.run_id).data.tags["kind"] == "test"


def test_a_reopened_run_is_the_same_run(tmp_path):
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    first = Tracker(uri, "exp", "run")
    first.open({"x": "1"})
    again = Tracker(uri, "exp", "run", run_id=first.run_id)
    again.add_metrics({"loss": 0.5}, 3)
    again.end()
    assert again.run_id == first.run_id
    assert [m.step for m in MlflowClient(uri).get_metric_history(first.run_id, "loss")] == [3]


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
