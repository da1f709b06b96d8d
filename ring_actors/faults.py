"""The fault plan: which injected faults apply to a client at a round, and how they strike."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Sequence

from ring_actors.config import FaultSection


def strike(plan: Sequence[FaultSection], client_id: int, round_: int) -> None:
    """Crash or freeze this process if the plan says so for ``round_``.

    A crash is a real process exit; a hang stops the whole process (so heartbeats go
    unanswered too) and a detached ``sh`` resumes it after ``for_s`` seconds.
    """
    for entry in plan:
        if entry.at_round != round_:
            continue
        if client_id in entry.crash:
            os._exit(1)
        if client_id in entry.hang:
            pid = os.getpid()
            subprocess.Popen(["sh", "-c", f"sleep {entry.for_s}; kill -CONT {pid}"])
            os.kill(pid, signal.SIGSTOP)


def slow_delay(plan: Sequence[FaultSection], client_id: int, round_: int) -> float:
    """Seconds a client sleeps in ``round_``: the latest slow entry that has started applies."""
    delay = 0.0
    for entry in sorted(plan, key=lambda e: e.at_round):
        if entry.at_round <= round_ and client_id in entry.slow:
            delay = entry.delay_s
    return delay


def driver_faults_due(
    plan: Sequence[FaultSection], ring_round: int, applied: set[int]
) -> list[int]:
    """Indices of the entries the driver applies (joins, kills of nodes or the coordinator)
    that the ring has reached (``ring_round``) and that were not applied yet."""
    return [
        index
        for index, entry in enumerate(plan)
        if (entry.join or entry.kill_node or entry.kill_coordinator)
        and entry.at_round <= ring_round
        and index not in applied
    ]
