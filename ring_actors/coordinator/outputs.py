"""The run's outputs while it goes on and when it ends: the output files (``summary.json``
says ``partial`` until the end), the MLflow run opened and closed, the summary."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ring_actors.config import Config
from ring_actors.coordinator.changes import RingChanges
from ring_actors.coordinator.output_files import write_outputs
from ring_actors.coordinator.results import Results
from ring_actors.coordinator.roster import Roster
from ring_actors.coordinator.run_summary import (
    RunFacts,
    draw_run_figures,
    run_level_metrics,
    summarise_run,
)
from ring_actors.coordinator.tracking import flatten
from ring_actors.coordinator.untracked import RunTracker
from ring_actors.storage.redact import public_config, redact_uri
from ring_actors.storage.run_folder import RunFolder

# Rows of rounds some member has not reported yet are written at most this often while a run
# goes on; a round every live member has reported is written at the next reconcile pass.
OUTPUTS_EVERY_S = 5.0
# The files are rewritten whole, so a write costs more as the run grows: whole rounds wait
# this many times the last write's duration after it, which keeps writing under a twentieth
# of the coordinator's time however long the run (the history log is what a resume reads).
WRITE_COST_SHARE = 20


@dataclass(eq=False)
class RunOutputs:
    """The coordinator's output files and MLflow run."""

    config: Config
    output_dir: Path
    lock: threading.RLock
    roster: Roster
    results: Results
    tracker: RunTracker
    changes: RingChanges  # read for why the run stopped
    outputs_at: float = field(default=0.0, init=False)
    outputs_cost_s: float = field(default=0.0, init=False)  # how long the last write took
    rows_written: int = field(default=0, init=False)
    # the rounds every live member had finished at the last write
    rounds_written: int = field(default=0, init=False)

    def write_partial(self) -> None:
        """The output files as they stand, so a run that dies keeps every finished round;
        ``summary.json`` says ``partial`` until the run is finalized.

        A round every member reported is written without waiting for ``OUTPUTS_EVERY_S``,
        in which a run of short rounds, or one killed, would finish rounds its outputs never
        show; only the write's own cost spaces such writes (``WRITE_COST_SHARE``)."""
        now = time.monotonic()
        with self.lock:
            rows, completed = self.results.rows, self._rounds_completed()
            since = now - self.outputs_at
            throttled = len(rows) == self.rows_written or since < OUTPUTS_EVERY_S
            whole_due = completed != self.rounds_written and (
                since >= WRITE_COST_SHARE * self.outputs_cost_s
            )
            if throttled and not whole_due:
                return
            self.outputs_at, self.rows_written, self.rounds_written = now, len(rows), completed
            summary = {**self.summary(self.results.now()), "partial": True}
            config, rows, events = self.public_config(), list(rows), list(self.results.events)
        write_outputs(self.output_dir, config, summary, rows, events)
        self.outputs_cost_s = time.monotonic() - now

    def public_config(self) -> dict[str, Any]:
        """The config as written and logged: no credentials in its tracking URI."""
        return public_config(self.config.to_dict())

    def open_tracking(self) -> None:
        """Start the tracker's writer, which creates the MLflow run (a restarted coordinator
        reopens its own) and then sends buffered metrics on its own thread: a slow or absent
        tracking server never delays failure detection."""
        config = self.config
        tags = {
            "algorithm": config.algorithm.name,
            "dataset": config.data.dataset,
            "topology": config.topology.kind,
            "mode": config.schedule.mode,
            "output_dir": str(self.output_dir),
        }
        if config.tracking.parent_run_id:  # MLflow shows the run under its sweep
            tags["mlflow.parentRunId"] = config.tracking.parent_run_id
        self.tracker.open(flatten(self.public_config()), tags)

    def finalize(self, wall_s: float) -> dict[str, Any]:
        """Write the output files, log them to MLflow, close the run; return the summary."""
        self.open_tracking()
        with self.lock:
            self.results.history.flush()  # the last reports, which the timer's save may miss
            for round_, means in self.results.full_round_means():
                self.tracker.add_metrics(means, round_)
            summary = {**self.summary(wall_s), "partial": False}
            self.tracker.add_metrics(
                {
                    "final_local_acc": summary["local_acc"]["mean"],
                    "final_global_acc": summary["global_acc"]["mean"],
                    **run_level_metrics(summary),
                },
                summary["rounds_completed"],
            )
            config, rows = self.public_config(), list(self.results.rows)
            events = list(self.results.events)
        write_outputs(self.output_dir, config, summary, rows, events)
        if self.config.tracking.figures:
            draw_run_figures(self.output_dir)  # uploaded with the outputs below
        private = () if self.config.tracking.upload_checkpoints else RunFolder.PRIVATE
        self.tracker.log_artifacts(self.output_dir, private)
        unsent = self.tracker.end()
        if unsent is not None:  # MLflow did not take everything: the summary says where it is
            summary["mlflow"]["unsent_metrics"] = str(unsent)
            write_outputs(self.output_dir, config, summary, rows, events)
        return summary

    def _unfinished_traffic(self) -> list[dict[str, float]]:
        """Each client's hops and bytes summed over its round reports, for the clients that
        never reported done: a crash ends the count it would have sent, not its rounds'."""
        totals: dict[int, dict[str, float]] = {}
        for reports in self.results.by_round.values():
            for client, metrics in reports.items():
                if client not in self.results.done:
                    total = totals.setdefault(client, {"hops": 0.0, "bytes_sent": 0.0})
                    total["hops"] += metrics.get("hops", 0.0)
                    total["bytes_sent"] += metrics.get("bytes_sent", 0.0)
        return list(totals.values())

    def _rounds_completed(self) -> int:
        """The rounds every live member has finished; once none is left, the rounds the ring
        had finished when its last member went (the most any member finished)."""
        table = self.roster.table
        members = table.members
        if not table.live:
            return max((m.last_round + 1 for m in members.values()), default=0)
        return min(members[c].last_round + 1 for c in table.live)

    def summary(self, wall_s: float) -> dict[str, Any]:
        table = self.roster.table
        live = table.live
        return summarise_run(
            self.config,
            RunFacts(
                members=len(table.members),
                rounds_completed=self._rounds_completed(),
                ring_order=live,
                rows=self.results.rows,
                reports=self.results.reports(),
                done=list(self.results.done.values()),
                unfinished_traffic=self._unfinished_traffic(),
                events=self.results.events,
                stop_reason=self.changes.stop_reason,
                finished=bool(live) and all(c in self.results.done for c in live),
                mlflow={
                    "tracking_uri": redact_uri(self.tracker.uri),
                    "run_id": self.tracker.run_id,
                },
            ),
            wall_s,
        )
