"""Ray's notices about the run's own worker processes, kept off the user's terminal.

The run handles a client that dies (the coordinator bypasses it; the summary tells the
crash), while Ray's notice, printed into the driver's output, blames the OOM killer first for
any unexpected exit, an injected crash included. A call in flight to an actor the driver
killed itself (a run stopped at once by a second Ctrl-C, its coordinator mid-call) gets a
notice too. And a ring runs one process per client by design, on fractional CPUs, so the
raylet's warning that "N PYTHON worker processes have been started ... 4x the maximum
expected startup concurrency" (at 16 workers on a 2-core node, and again at 5x, 6x ...)
names nothing a user can change: the launch already starts clients in waves the node can
take (``client_starts.py``), and the memory they need is checked before.

Ray prints its raylet's error messages from a thread of the driver through
``ray._private.worker.print_to_stdstream``: no public option turns them off (``log_to_driver``
included), and nothing but the node's worker start concurrency moves that warning, which would
change how many processes Ray starts at once. This wraps that function and drops those
lines. Every other line goes through as before, and a Ray without that function prints
everything.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from typing import Any

import ray
import ray._private.worker as ray_worker
from ray.experimental.internal_kv import _internal_kv_get, _internal_kv_put

from ring_actors.runtime.actor_names import run_namespace

WORKER_DIED = "A worker died or was killed while executing a task"
WORKER_PID = re.compile(r"Worker PID: (\d+)")
WORKER_IP = re.compile(r"Worker IP address: (\S+)")
KILLED_BY_DRIVER = "because it was killed by `ray.kill`"  # only the driver kills the job's actors
MANY_WORKERS = "worker processes have been started on node"
HANDLED: set[int] = set()  # the processes whose deaths the driver's runs handle
RUNS: set[str] = set()  # the driver's runs, whose clients record their own processes


def record_client_process(run_key: str) -> None:
    """Called by a client process as it starts, a process Ray restarted a client in included:
    its death is the run's to tell, whenever it comes (Ray's key-value store, as the lap
    groups' rendezvous)."""
    key = _process_key(ray.util.get_node_ip_address(), os.getpid())
    _internal_kv_put(key, b"1", overwrite=True, namespace=run_namespace(run_key))


def quiet_deaths_in(run_key: str) -> None:
    """Show no Ray notice of the death of any process a client of ``run_key`` recorded."""
    RUNS.add(run_key)
    quiet_ray_notices()


def _process_key(ip: str, pid: int) -> str:
    return f"client-process/{ip}/{pid}"


def _recorded(ip: str, pid: int) -> bool:
    """Whether a client of a run this driver started recorded the process; the records live
    in Ray, so a notice printed while Ray is down (its last lines at shutdown) finds none."""
    if not RUNS or not ray.is_initialized():
        return False
    key = _process_key(ip, pid)
    return any(_internal_kv_get(key, namespace=run_namespace(run)) for run in RUNS)


def quiet_ray_notices() -> None:
    """Route Ray's messages to the driver through the filter below (once per process)."""
    printer = getattr(ray_worker, "print_to_stdstream", None)
    if printer is not None and not isinstance(printer, _WithoutHandledNotices):
        ray_worker.print_to_stdstream = _WithoutHandledNotices(printer)


def quiet_deaths_of(pids: Iterable[int]) -> None:
    """Show no Ray notice of these processes' deaths (the run's clients)."""
    HANDLED.update(pids)
    quiet_ray_notices()


def is_handled_death(line: str) -> bool:
    """Whether ``line`` is Ray's notice that a process the run handles died."""
    pid, ip = WORKER_PID.search(line), WORKER_IP.search(line)
    if WORKER_DIED not in line or pid is None:
        return False
    if int(pid.group(1)) in HANDLED:
        return True
    return ip is not None and _recorded(ip.group(1), int(pid.group(1)))


def is_handled_notice(line: str) -> bool:
    """Whether ``line`` is one of Ray's notices about what the run does by design: a death it
    handles, a call to an actor it killed, many worker processes started."""
    return is_handled_death(line) or KILLED_BY_DRIVER in line or MANY_WORKERS in line


class _WithoutHandledNotices:
    """Ray's printer of driver messages, less the notices about what the run does by design."""

    def __init__(self, printer: Callable[..., None]) -> None:
        self.printer = printer

    def __call__(self, data: dict[str, Any], *args: Any, **kwargs: Any) -> None:
        if "lines" not in data:
            self.printer(data, *args, **kwargs)
            return
        lines = [line for line in data["lines"] if not is_handled_notice(line)]
        if lines:
            self.printer({**data, "lines": lines}, *args, **kwargs)
