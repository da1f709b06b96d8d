"""The fault plan on a client: which entries strike it at a round, and how."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from ring_actors.faults.plan import FaultSection
from ring_actors.storage.run_folder import RunFolder


class InjectedError(RuntimeError):
    """The fault plan's ``error`` entry: the client's method raises, as a bug in it would."""


class FaultActions(Protocol):
    """How a client's host crashes or freezes it."""

    def crash(self) -> None: ...

    def freeze(self, seconds: float) -> None: ...


class ProcessFaults:
    """Faults of a real process: a crash is an exit; a hang stops the whole process (so
    heartbeats go unanswered too) and a detached ``sh`` resumes it after ``seconds``."""

    def crash(self) -> None:
        os._exit(1)

    def freeze(self, seconds: float) -> None:
        pid = os.getpid()
        subprocess.Popen(["sh", "-c", f"sleep {float(seconds)}; kill -CONT {pid}"])
        os.kill(pid, signal.SIGSTOP)


def strike(
    plan: Sequence[FaultSection], client_id: int, round_: int, actions: FaultActions
) -> None:
    """Crash, freeze or fail this client if the plan says so for ``round_``."""
    for entry in plan:
        if entry.at_round != round_:
            continue
        if client_id in entry.crash:
            actions.crash()
        if client_id in entry.hang:
            actions.freeze(entry.for_s)
        if client_id in entry.error:
            raise InjectedError(f"client {client_id}: injected error in round {round_}")


def fail_start(plan: Sequence[FaultSection], client_id: int, state_dir: Path) -> None:
    """Raise in this client's constructor if the plan's ``fail_start`` says so.

    Each attempt is a new process, so the attempts made so far are counted in a file of the
    run's client state folder: the first ``times`` of them fail, later ones go through.
    """
    times = sum(entry.times for entry in plan if client_id in entry.fail_start)
    if not times:
        return
    marker = RunFolder.failed_starts_in(state_dir, client_id)
    failed = int(marker.read_text()) if marker.exists() else 0
    if failed < times:
        state_dir.mkdir(parents=True, exist_ok=True)
        marker.write_text(str(failed + 1))
        raise InjectedError(f"client {client_id}: injected start failure {failed + 1} of {times}")


def slow_delay(plan: Sequence[FaultSection], client_id: int, round_: int) -> float:
    """Seconds a client sleeps in ``round_``: the latest slow entry that has started applies."""
    delay = 0.0
    for entry in sorted(plan, key=lambda e: e.at_round):
        if entry.at_round <= round_ and client_id in entry.slow:
            delay = entry.delay_s
    return delay
