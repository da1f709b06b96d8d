"""Ray's notices of the run's clients' deaths stay off the terminal; nothing else does."""

from __future__ import annotations

import os
import sys
import time
from types import SimpleNamespace
from typing import Any

import pytest
import ray
import ray._private.worker as ray_worker

from ring_actors.runtime import worker_deaths
from ring_actors.runtime.worker_deaths import RestartedClients, quiet_deaths_of


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


class SlowToStart:
    """A client whose new process takes a while to construct, as a restarted one does on a
    loaded node (its data, its model, its checkpoint)."""

    def __init__(self, start_s: float) -> None:
        time.sleep(start_s)

    def describe(self) -> SimpleNamespace:
        return SimpleNamespace(pid=os.getpid())


@pytest.mark.usefixtures("ray_local")
def test_a_client_that_answers_late_still_has_its_death_quieted(monkeypatch):
    """The driver once waited half a second for a restarted client's answer and asked no
    more until the next membership change: a client slower to start crashed again with Ray's
    OOM notice on the terminal."""
    monkeypatch.setattr(ray_worker, "print_to_stdstream", lambda data, **_: None)
    monkeypatch.setattr(worker_deaths, "HANDLED", set())
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers lack tests/
    client = ray.remote(num_cpus=0)(SlowToStart).remote(2.0)
    restarted = RestartedClients()
    restarted.ask([client])
    started = time.monotonic()
    restarted.quiet_answered()
    assert time.monotonic() - started < 1.0 and not worker_deaths.HANDLED  # not waited for
    ready, _ = ray.wait(restarted.asked, timeout=60)
    restarted.quiet_answered()
    quieted = set(worker_deaths.HANDLED)
    assert ready and quieted == {ray.get(client.describe.remote()).pid}
    assert restarted.asked == []
