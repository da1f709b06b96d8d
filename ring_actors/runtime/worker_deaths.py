"""Ray's notice of a client process's death, kept off the user's terminal.

The run handles a client that dies (the coordinator bypasses it; the summary tells the
crash), while Ray's notice, printed into the driver's output, blames the OOM killer first for
any unexpected exit, an injected crash included. Ray prints its raylet's error messages from
a thread of the driver through ``ray._private.worker.print_to_stdstream`` (no public option
turns them off, ``log_to_driver`` included); this wraps that function and drops the lines
about processes the run handles. Every other line goes through as before, and a Ray without
that function prints everything.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

import ray._private.worker as ray_worker

WORKER_DIED = "A worker died or was killed while executing a task"
WORKER_PID = re.compile(r"Worker PID: (\d+)")
HANDLED: set[int] = set()  # the processes whose deaths the driver's runs handle


def quiet_deaths_of(pids: Iterable[int]) -> None:
    """Show no Ray notice of these processes' deaths (the run's clients)."""
    HANDLED.update(pids)
    printer = getattr(ray_worker, "print_to_stdstream", None)
    if printer is not None and not isinstance(printer, _WithoutHandledDeaths):
        ray_worker.print_to_stdstream = _WithoutHandledDeaths(printer)


def is_handled_death(line: str) -> bool:
    """Whether ``line`` is Ray's notice that a process the run handles died."""
    pid = WORKER_PID.search(line)
    return WORKER_DIED in line and pid is not None and int(pid.group(1)) in HANDLED


class _WithoutHandledDeaths:
    """Ray's printer of driver messages, less the notices of handled deaths."""

    def __init__(self, printer: Callable[..., None]) -> None:
        self.printer = printer

    def __call__(self, data: dict[str, Any], *args: Any, **kwargs: Any) -> None:
        if "lines" not in data:
            self.printer(data, *args, **kwargs)
            return
        lines = [line for line in data["lines"] if not is_handled_death(line)]
        if lines:
            self.printer({**data, "lines": lines}, *args, **kwargs)
