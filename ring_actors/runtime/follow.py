"""Following a launched run: the driver polls the coordinator (every wait with a deadline),
applies the fault plan's driver-side entries, shows progress and asks for the outputs."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow.parquet as pq
import ray
from ray.exceptions import GetTimeoutError

from ring_actors.coordinator.history import read_history
from ring_actors.coordinator.output_files import EVENT_COLUMNS
from ring_actors.faults.driver_side import AppliedFaults, carry_out
from ring_actors.faults.plan import FaultSection
from ring_actors.runtime.progress_bar import RoundProgress
from ring_actors.runtime.ray_transport import CALLEE_DIED
from ring_actors.storage.run_folder import RunFolder

if TYPE_CHECKING:
    from ring_actors.runtime.experiment import Experiment


class CoordinatorLost(RuntimeError):
    """The coordinator did not answer within its bound: the run ends without it (the
    outputs it wrote last stay in the output directory, marked partial)."""


def ask(experiment: Experiment, call: ray.ObjectRef, wait_s: float) -> Any:
    """A driver's wait for one coordinator call, never longer than ``wait_s``."""
    try:
        return ray.get(call, timeout=wait_s)
    except GetTimeoutError as err:
        raise CoordinatorLost(
            f"the coordinator did not answer within {wait_s:g} s "
            f"(derived from schedule.hop_timeout_s={experiment.config.schedule.hop_timeout_s:g}); "
            f"outputs so far in {experiment.output_dir}"
        ) from err


def wait_and_finalize(experiment: Experiment, started: float, progress: bool) -> dict[str, Any]:
    """Follow progress (applying the fault plan's driver-side entries) until all are done.

    A coordinator that does not answer is being restarted by Ray; one that stays silent
    past ``coordinator_back_s`` never comes back (its node is gone, or its constructor
    raises): :class:`CoordinatorLost` ends the run.
    """
    config = experiment.config
    timeouts = experiment.timeouts
    silent_since: float | None = None
    applied = applied_faults(experiment)
    printed = 0  # client errors shown so far
    shown = RoundProgress(config.clients.count * config.experiment.rounds, progress)
    try:
        while True:
            try:
                state = ray.get(
                    experiment.coordinator.progress.remote(), timeout=timeouts.control_s
                )
                silent_since = None
            except (*CALLEE_DIED, GetTimeoutError) as err:  # being restarted: ask again
                now = time.monotonic()
                silent_since = now if silent_since is None else silent_since
                if now - silent_since > timeouts.coordinator_back_s:
                    raise CoordinatorLost(
                        f"the coordinator has not answered for {now - silent_since:.0f} s "
                        f"(bound {timeouts.coordinator_back_s:g} s, 10 x "
                        f"schedule.hop_timeout_s): {type(err).__name__}; outputs so far in "
                        f"{experiment.output_dir}"
                    ) from err
                time.sleep(0.5)
                continue
            for error in state.errors[printed:]:
                shown.write(client_error_line(experiment, error))
            printed = len(state.errors)
            if state.stopped:
                shown.write(f"run stopped: {state.stopped}")
                break
            rounds = config.experiment.rounds
            carry_out(experiment, config.faults, state.round, state.newest, applied, rounds)
            shown.update(state)
            if state.finished:
                break
            time.sleep(0.5)
        call = experiment.coordinator.finalize.remote(time.monotonic() - started)
        summary = ask(experiment, call, timeouts.finalize_s)
        shown.finish(summary)
        return summary
    finally:
        shown.close()


def applied_faults(experiment: Experiment) -> AppliedFaults:
    """The plan's driver-side entries applied so far: none in a new run, those its earlier
    drivers noted in a resumed one."""
    folder = RunFolder(experiment.output_dir)
    if not experiment.resume:
        return AppliedFaults(folder.driver_faults)
    return resumed_faults(folder, experiment.config.faults)


def resumed_faults(folder: RunFolder, plan: Sequence[FaultSection]) -> AppliedFaults:
    """What a resumed run's earlier drivers noted; in a folder with no such record (written
    before there was one, or lost), what the run's events show they applied."""
    if folder.driver_faults.exists():
        return AppliedFaults.read(folder.driver_faults)
    return AppliedFaults.recovered(folder.driver_faults, plan, recorded_events(folder))


def recorded_events(folder: RunFolder) -> list[dict[str, Any]]:
    """A run's events, each once, in the order they came: the coordinator's history
    (appended as they came) and events.parquet (rewritten now and then), which may hold
    what a lost or torn history does not."""
    logged = read_history(folder.coordinator_history).events
    written = pq.read_table(folder.events).to_pylist() if folder.events.is_file() else []
    seen = {_identity(e) for e in logged}
    events = logged + [e for e in written if _identity(e) not in seen]
    return sorted(events, key=lambda e: e["time_s"])


def _identity(event: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(event.get(column) for column in EVENT_COLUMNS)


def client_error_line(experiment: Experiment, error: dict[str, Any]) -> str:
    """One line for a client's failed round; its traceback goes to ``client_errors.log``."""
    log_file = RunFolder(experiment.output_dir).path / RunFolder.CLIENT_ERRORS
    with log_file.open("a") as file:
        file.write(f"client {error['client']}, round {error['round']}:\n{error['error']}\n")
    lines = error["error"].strip().splitlines()
    return (
        f"client {error['client']} failed in round {error['round']}: "
        f"{lines[-1] if lines else 'error'} (schedule.on_client_error="
        f"{experiment.config.schedule.on_client_error}; traceback in {log_file})"
    )
