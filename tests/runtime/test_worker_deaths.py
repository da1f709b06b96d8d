"""Ray's notices of the run's clients' deaths stay off the terminal; nothing else does."""

from __future__ import annotations

from typing import Any

import ray._private.worker as ray_worker

from ring_actors.runtime import worker_deaths
from ring_actors.runtime.worker_deaths import quiet_deaths_of


def notice(pid: int) -> str:
    """Ray's notice, as its raylet words it, of the death of the worker ``pid``."""
    return (
        "A worker died or was killed while executing a task by an unexpected system error. "
        f"Worker IP address: 192.0.2.2 Worker port: 40631 Worker PID: {pid} Worker exit "
        "type: SYSTEM_ERROR Worker exit detail: Some common causes include: (1) the process "
        "was killed by the OOM killer due to high memory usage"
    )


def test_only_the_notices_of_the_runs_clients_deaths_are_dropped(monkeypatch):
    printed: list[dict[str, Any]] = []
    monkeypatch.setattr(ray_worker, "print_to_stdstream", lambda data, **_: printed.append(data))
    # The driver's runs earlier in this process handled real clients, 9999 perhaps among them.
    monkeypatch.setattr(worker_deaths, "HANDLED", set())
    quiet_deaths_of([4101, 4102])
    quiet_deaths_of([4103])  # a second run in the same driver: wrapped once
    show = ray_worker.print_to_stdstream
    other = "Task was killed due to the node running low on memory."
    show({"lines": [notice(4101), notice(9999), other], "pid": "raylet"}, ignore_prefix=False)
    show({"lines": [notice(4103)], "pid": "raylet"}, ignore_prefix=False)
    assert printed == [{"lines": [notice(9999), other], "pid": "raylet"}]
