"""A real MLflow tracking server over HTTP that goes away mid-run: no metric is lost or
doubled, the caller is never held up, and a server gone for good leaves the unsent file."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from ring_actors.coordinator.output_files import write_outputs
from ring_actors.coordinator.tracking import Retry, Tracker
from ring_actors.runtime.driver import run_experiment
from ring_actors.storage.run_folder import RunFolder
from tests.conftest import needs_data, small_config

pytestmark = pytest.mark.slow  # an MLflow server takes ~30 s to start on a busy machine

MLFLOW = Path(sys.executable).parent / "mlflow"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """``mlflow server`` on 127.0.0.1 with a SQLite backend: started, killed outright (as a
    crashed host would go), and started again on the same port and store."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.store = f"sqlite:///{root / 'mlflow.db'}"  # read directly once the server is gone
        self.process: subprocess.Popen | None = None

    def start(self, timeout_s: float = 180.0) -> None:
        command = [
            str(MLFLOW),
            "server",
            "--host=127.0.0.1",
            f"--port={self.port}",
            f"--backend-store-uri={self.store}",
            f"--artifacts-destination={self.root / 'artifacts'}",
            "--workers=1",
        ]
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        with (self.root / "server.log").open("a") as log:
            self.process = subprocess.Popen(
                command, stdout=log, stderr=log, env=env, start_new_session=True
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.process.poll() is None, (self.root / "server.log").read_text()[-2000:]
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                time.sleep(0.5)
        raise TimeoutError(f"mlflow server not up in {timeout_s}s")

    def kill(self) -> None:
        """SIGKILL to the server's whole process group (it runs uvicorn as a child)."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self.process = None


@pytest.fixture
def server(tmp_path, monkeypatch):
    # Explicit, so the writer's process-wide defaults stay inside this test.
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    server = Server(tmp_path)
    server.start()
    yield server
    server.kill()


def add_timed(tracker: Tracker, steps: range) -> float:
    """Add two metrics per step; the longest a single call took."""
    longest = 0.0
    for step in steps:
        started = time.monotonic()
        tracker.add_metrics({"loss": 1.0 / (step + 1), "acc": step / 1000}, step)
        longest = max(longest, time.monotonic() - started)
    return longest


def history(uri: str, run_id: str) -> dict[str, list[int]]:
    client = MlflowClient(uri)
    return {
        k: sorted(m.step for m in client.get_metric_history(run_id, k)) for k in ("loss", "acc")
    }


def test_a_server_that_goes_away_and_comes_back_gets_every_metric_once(tmp_path, server):
    out = tmp_path / "run"
    write_outputs(out, {"experiment": {"rounds": 3}}, {"wall_s": 1.0}, [], [])
    (out / "clients").mkdir()
    (out / "clients" / "client-0.pt").write_bytes(b"private model")
    (out / "coordinator.json").write_text("{}")
    tracker = Tracker(server.uri, "http", "run", output_dir=out, retry=Retry(max_backoff_s=2.0))
    assert tracker.open({"rounds": "3"}, {"kind": "test"})
    add_timed(tracker, range(50))
    assert tracker.flush(wait_s=60)
    assert history(server.uri, tracker.run_id) == {"loss": list(range(50)), "acc": list(range(50))}

    add_timed(tracker, range(50, 100))
    tracker.flush()
    server.kill()  # while the writer may be sending these: sent, half-sent or not at all
    longest = add_timed(tracker, range(100, 150))
    started = time.monotonic()
    assert not tracker.flush()  # nothing raised, nothing waited for
    assert time.monotonic() - started < 0.5 and longest < 0.05
    time.sleep(3)  # the writer fails a few times meanwhile
    assert len(tracker._pending) >= 100  # at least the 50 steps since the kill, all kept

    server.start()
    assert tracker.flush(wait_s=120)
    assert history(server.uri, tracker.run_id) == {
        "loss": list(range(150)),
        "acc": list(range(150)),
    }
    tracker.log_artifacts(out, RunFolder.PRIVATE)
    assert tracker.end() is None and not RunFolder(out).unsent_metrics.exists()
    client = MlflowClient(server.uri)
    assert client.get_run(tracker.run_id).info.status == "FINISHED"
    assert client.get_run(tracker.run_id).data.params == {"rounds": "3"}
    uploaded = {a.path for a in client.list_artifacts(tracker.run_id)}
    assert uploaded == {"config.yaml", "summary.json", "metrics.parquet", "events.parquet"}


def test_a_server_gone_for_good_leaves_every_unsent_metric_in_the_file(tmp_path, server):
    tracker = Tracker(server.uri, "http", "run", output_dir=tmp_path, retry=Retry(close_s=3.0))
    assert tracker.open()
    add_timed(tracker, range(10))
    assert tracker.flush(wait_s=60)
    server.kill()
    assert add_timed(tracker, range(10, 40)) < 0.05
    started = time.monotonic()
    assert tracker.end() == RunFolder(tmp_path).unsent_metrics
    assert time.monotonic() - started < 3.0 + 5 + 5  # close_s, one request's timeout, slack
    rows = [
        json.loads(line) for line in RunFolder(tmp_path).unsent_metrics.read_text().splitlines()
    ]
    assert all(r["run_id"] == tracker.run_id for r in rows)
    unsent = sorted((r["key"], r["step"]) for r in rows)
    assert unsent == sorted((k, s) for s in range(10, 40) for k in ("loss", "acc"))
    # What the server did take before it went: the rest, none of it in the file as well.
    assert history(server.store, tracker.run_id) == {
        "loss": list(range(10)),
        "acc": list(range(10)),
    }


@needs_data
def test_a_ring_whose_tracking_server_is_gone_finishes_and_keeps_its_metrics(ray_local, tmp_path):
    """The real coordinator: its ring never waits on MLflow, and what MLflow never got
    is in the output directory at the end."""
    uri = f"tracking.uri=http://127.0.0.1:{free_port()}"
    config = small_config(tmp_path, uri, "tracking.give_up_s=3", "tracking.enabled=true")
    out = tmp_path / "out"
    summary = run_experiment(config, out, progress=False)
    assert summary["rounds_completed"] == 3 and summary["mlflow"]["run_id"] is None
    unsent = RunFolder(out).unsent_metrics
    rows = [json.loads(line) for line in unsent.read_text().splitlines()]
    keys = {(r["key"], r["step"]) for r in rows}
    assert {(f"client_{c}/local_acc", r) for c in range(4) for r in range(3)} <= keys
    assert {("local_acc_mean", r) for r in range(3)} <= keys
    assert len(keys) == len(rows)  # each metric once


def test_a_writer_stuck_in_a_request_still_leaves_every_metric_in_the_file(tmp_path, monkeypatch):
    listener = socket.socket()  # accepts connections and never answers
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "60")  # one request outlives end's wait
    uri = f"http://127.0.0.1:{listener.getsockname()[1]}"
    retry = Retry(close_s=0.2, open_wait_s=0.1, request_timeout_s=0)
    tracker = Tracker(uri, "stuck", "run", output_dir=tmp_path, retry=retry)
    tracker.add_metrics({"loss": 1.5, "acc": 0.25}, 3)
    started = time.monotonic()
    path = tracker.end()
    assert time.monotonic() - started < 15
    # None before: the stuck writer had written nothing
    assert path == RunFolder(tmp_path).unsent_metrics
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert sorted((r["key"], r["value"], r["step"]) for r in rows) == [
        ("acc", 0.25, 3),
        ("loss", 1.5, 3),
    ]
    listener.close()
