"""Metrics stay buffered until MLflow takes them: a tracking server that is down loses none."""

from __future__ import annotations

from mlflow.tracking import MlflowClient

from ring_actors.tracking import Tracker


def test_metrics_sent_while_the_server_is_down_arrive_when_it_is_back(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker(uri, "buffer", "run")
    tracker.open()
    store = tracker.client
    tracker.client = MlflowClient(tracking_uri="http://127.0.0.1:9")  # nothing listens there
    tracker.add_metrics({"loss": 1.0}, 0)
    tracker.add_metrics({"loss": 0.5}, 1)
    try:
        tracker.flush()
    except Exception:  # noqa: BLE001 - the server is down: the flush fails, the metrics stay
        pass
    else:
        raise AssertionError("a flush to a dead server cannot succeed")
    tracker.client = store  # the server is back
    tracker.flush()
    history = store.get_metric_history(tracker.run_id, "loss")
    assert sorted((m.step, m.value) for m in history) == [(0, 1.0), (1, 0.5)]
    tracker.flush()  # nothing is sent twice
    assert len(store.get_metric_history(tracker.run_id, "loss")) == 2
