"""A launch of many clients prints none of Ray's notices about the run's worker processes,
which no setting of the run changes; notices a user can act on still show."""

from __future__ import annotations

import os
from typing import Any

import pytest
import ray._private.worker as ray_worker

from ring_actors.runtime.worker_deaths import quiet_ray_notices
from tests.conftest import UNTRACKED, fresh_store
from tests.helpers.train_cli import run

# Ray's raylet, word for word, when the worker processes on a node reach 4x its start
# concurrency (its cores), and when a task ran out of memory.
MANY_WORKERS = (
    "WARNING: 8 PYTHON worker processes have been started on node: 0daaeb54 with address: "
    "192.0.2.2, which is 4x the maximum expected startup concurrency (2). This could be a "
    "result of using a large number of actors, tasks blocked in ray.get() calls, or tasks "
    "with fractional CPU requests (e.g., num_cpus=0.1) allowing high concurrency. See "
    "https://github.com/ray-project/ray/issues/3644 for some discussion of workarounds."
)
KILLED_MID_CALL = (
    "Task Coordinator.finalize failed. There are infinite retries remaining, so the task will "
    "be retried. Error: The actor is dead because it was killed by `ray.kill`."
)
OUT_OF_MEMORY = "Task was killed due to the node running low on memory."
# Ray warns at 4 worker processes per core past twice its cap of I/O workers (which only
# spill objects): 16 on 2 cores, more clients than a test should start. Without that
# allowance it warns at 8 on 2 cores, which a launch of 6 clients reaches: 4 a core is ahead.
CLIENTS = 4 * (os.cpu_count() or 1)
# Eight clients each importing torch on two loaded cores took 98 s here and over 120 s in CI.
LAUNCH_TIMEOUT_S = 360


def test_only_the_notices_about_the_runs_own_processes_are_dropped(monkeypatch):
    printed: list[dict[str, Any]] = []
    monkeypatch.setattr(ray_worker, "print_to_stdstream", lambda data, **_: printed.append(data))
    quiet_ray_notices()
    lines = [MANY_WORKERS, KILLED_MID_CALL, OUT_OF_MEMORY]
    ray_worker.print_to_stdstream({"lines": lines, "pid": "raylet"}, ignore_prefix=False)
    assert printed == [{"lines": [OUT_OF_MEMORY], "pid": "raylet"}]


@pytest.mark.slow
@pytest.mark.skipif(CLIENTS > 8, reason="Ray warns only past 8 clients on a node this large")
def test_a_launch_of_many_clients_prints_no_worker_count_warning(tmp_path, monkeypatch):
    monkeypatch.setenv("RAY_max_io_workers", "0")  # the driver's local Ray reads it
    out, _ = run(
        "--no-progress",
        "--output-dir",
        str(tmp_path / "run"),
        "data.dataset=fashion-mnist-sample",
        f"clients.count={CLIENTS}",
        "clients.num_cpus=0.1",
        "experiment.rounds=1",
        "faults=[]",
        "data.max_train_per_client=50",
        "eval.global_max_samples=100",
        "eval.local_max_samples=200",
        f"tracking.uri={fresh_store(tmp_path / 'mlflow.db')}",
        *UNTRACKED,
        timeout=LAUNCH_TIMEOUT_S,
    )
    assert f"{CLIENTS} clients x 1 rounds" in out  # it launched
    assert "worker processes have been started" not in out, out
