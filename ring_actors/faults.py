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
    plan: Sequence[FaultSection], ring_round: int, newest: int, applied: set[int]
) -> list[int]:
    """Indices of the entries the driver applies that are due and not applied yet.

    Kills of nodes or the coordinator are due once every member has reached their round
    (``ring_round``). A join at round R is due once some member has finished round R - 2
    (``newest``): spliced in then, the joiner is in the ring before anyone begins round R.
    """

    def due(entry: FaultSection) -> bool:
        if entry.join:
            return newest + 2 >= entry.at_round
        return bool(entry.kill_node or entry.kill_coordinator) and ring_round >= entry.at_round

    return [i for i, entry in enumerate(plan) if i not in applied and due(entry)]
