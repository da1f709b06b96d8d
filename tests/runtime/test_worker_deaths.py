"""Ray's notices of the run's clients' deaths stay off the terminal; nothing else does."""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest
import ray
import ray._private.worker as ray_worker

from ring_actors.runtime import worker_deaths
from ring_actors.runtime.worker_deaths import quiet_deaths_in, quiet_deaths_of


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
    monkeypatch.setattr(worker_deaths, "RUNS", set())
    quiet_deaths_of([4101, 4102])
    quiet_deaths_of([4103])  # a second run in the same driver: wrapped once
    show = ray_worker.print_to_stdstream
    other = "Task was killed due to the node running low on memory."
    show({"lines": [notice(4101), notice(9999), other], "pid": "raylet"}, ignore_prefix=False)
    show({"lines": [notice(4103)], "pid": "raylet"}, ignore_prefix=False)
    assert printed == [{"lines": [notice(9999), other], "pid": "raylet"}]


@pytest.mark.usefixtures("no_ray")
def test_a_notice_printed_while_ray_is_down_is_shown(monkeypatch):
    """Ray's last lines can come as it shuts down, after an earlier run in this driver
    registered its records in Ray: a record cannot be read then, and the notice is shown."""
    printed: list[dict[str, Any]] = []
    monkeypatch.setattr(ray_worker, "print_to_stdstream", lambda data, **_: printed.append(data))
    monkeypatch.setattr(worker_deaths, "RUNS", {"an-earlier-run"})
    quiet_deaths_in("an-earlier-run")
    ray_worker.print_to_stdstream({"lines": [notice(4242)], "pid": "raylet"}, ignore_prefix=False)
    assert printed == [{"lines": [notice(4242)], "pid": "raylet"}]


def restarted_client_process(run_key: str) -> tuple[str, int]:
    """A process a client was restarted in: it records itself as it starts."""
    from ring_actors.runtime.worker_deaths import record_client_process

    record_client_process(run_key)
    return ray.util.get_node_ip_address(), os.getpid()


@pytest.mark.usefixtures("ray_local")
def test_a_process_a_client_recorded_as_it_started_has_its_death_quieted(monkeypatch):
    """The driver once learnt a restarted client's process by asking it: a client that died
    again before it answered left Ray's OOM notice on the terminal. The process records itself
    as it starts, and the notice of its death is dropped whenever it comes; a process of
    another run, or none, is shown."""
    printed: list[dict[str, Any]] = []
    monkeypatch.setattr(ray_worker, "print_to_stdstream", lambda data, **_: printed.append(data))
    monkeypatch.setattr(worker_deaths, "HANDLED", set())
    monkeypatch.setattr(worker_deaths, "RUNS", set())
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers lack tests/
    ip, pid = ray.get(ray.remote(num_cpus=0)(restarted_client_process).remote("run-a"))
    elsewhere = ray.remote(num_cpus=0, runtime_env={"env_vars": {"OTHER_WORKER": "1"}})
    _, other = ray.get(elsewhere(restarted_client_process).remote("run-b"))  # its own process
    assert other != pid
    quiet_deaths_in("run-a")
    lines = [notice(pid).replace("192.0.2.2", ip), notice(other).replace("192.0.2.2", ip)]
    ray_worker.print_to_stdstream({"lines": lines, "pid": "raylet"}, ignore_prefix=False)
    assert [data["lines"] for data in printed] == [[lines[1]]]
