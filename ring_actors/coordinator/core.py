"""The coordinator's control logic with no Ray in it: membership, probes, bypass, heal,
admission, the error policy, the watchdog and results.

Clients are :class:`~ring_actors.delivery.transport.ClientHandle` s whose calls return pending
answers, so every reconcile step is testable in-process; the Ray actor
(``runtime/coordinator_actor.py``) only builds handles and runs ``reconcile`` on a thread.
Every RPC records facts and returns; a change the coordinator acts on (a bypass, an
admission) is checkpointed before it is broadcast, so a restarted coordinator never forgets
a member or re-issues an epoch.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ring_actors.config import Config
from ring_actors.coordinator.availability import Availability
from ring_actors.coordinator.changes import RingChanges
from ring_actors.coordinator.health import Health
from ring_actors.coordinator.history import HistoryLog
from ring_actors.coordinator.membership import MembershipTable
from ring_actors.coordinator.outputs import RunOutputs
from ring_actors.coordinator.progress import Progress, snapshot
from ring_actors.coordinator.recovery import Recovery
from ring_actors.coordinator.results import Results
from ring_actors.coordinator.roster import Roster
from ring_actors.coordinator.untracked import RunTracker
from ring_actors.coordinator.watch import Watch
from ring_actors.delivery.event_kinds import EventKind
from ring_actors.delivery.transport import ClientHandle, Readmission
from ring_actors.storage.run_folder import RunFolder
from ring_actors.timeouts import Timeouts

log = logging.getLogger(__name__)


class CoordinatorCore:
    """One writer of membership and results; ``reconcile`` is one non-blocking pass.

    Composed of parts built here with what each uses: ``roster`` (the members: table,
    handles, health), ``changes`` (views, bypasses, the stop), ``watch`` (the reconcile
    steps that look at the members), ``recovery`` (its record), ``availability`` (members
    away and back) and ``outputs`` (files and MLflow).
    """

    def __init__(
        self,
        config: Config,
        output_dir: Path,
        tracker: RunTracker,
        find_client: Callable[[int], ClientHandle | None] = lambda client_id: None,
    ) -> None:
        self.config = config
        self.timeouts = timeouts = Timeouts.from_schedule(config.schedule)
        self.output_dir = output_dir
        self.tracker = tracker
        self.roster = roster = Roster()
        self.lock = lock = threading.RLock()
        folder = RunFolder(output_dir)
        self.results = results = Results(HistoryLog(folder.coordinator_history))
        self.changes = changes = RingChanges(config, roster, results)
        self.watch = Watch(config, timeouts, roster, results, tracker, changes)
        self.recovery = Recovery(
            folder.coordinator_record,
            timeouts,
            lock,
            roster,
            find_client,
            results,
            tracker,
            changes,
            reports=self,
        )
        self.availability = Availability(
            config, timeouts, lock, roster, find_client, results, changes, record=self.recovery
        )
        self.outputs = RunOutputs(config, output_dir, lock, roster, results, tracker, changes)

    @property
    def table(self) -> MembershipTable:
        """The membership table as the roster holds it now (a restore replaces it)."""
        return self.roster.table

    @property
    def health(self) -> Health:
        """The members' health records as the roster holds them now."""
        return self.roster.health

    @property
    def stop_reason(self) -> str | None:
        """Why the run stopped early; None while it goes on (or once it ended well)."""
        return self.changes.stop_reason

    @property
    def rows(self) -> list[dict[str, Any]]:
        """Evaluated rows so far (one per client per evaluated round), read-only."""
        return self.results.rows

    @property
    def by_round(self) -> dict[int, dict[int, dict[str, float]]]:
        return self.results.by_round

    @property
    def events(self) -> list[dict[str, Any]]:
        return self.results.events

    @property
    def errors(self) -> list[dict[str, Any]]:
        return self.results.errors

    @property
    def done(self) -> dict[int, dict[str, int]]:
        return self.results.done

    # ---- membership RPCs ----------------------------------------------------------------

    def register(self, client_id: int, handle: ClientHandle, node_id: str) -> None:
        with self.lock:
            self.roster.register(client_id, handle, node_id)

    def adopt(self, client_id: int, handle: ClientHandle, node_id: str) -> bool:
        """A resumed run's new actor for a member the checkpoint knows; False if unknown."""
        with self.lock:
            return self.roster.adopt(client_id, handle, node_id)

    def start_clients(self) -> None:
        """Push every member its first view, then start all round loops."""
        with self.lock:
            self.results.started_at = time.monotonic()
            roster = self.roster
            for client_id in roster.table.live:
                roster.start(client_id)
            self.watch.pace_of_members()  # the configured speeds, for the first view
            self.recovery.checkpoint(force=True)
            self.changes.broadcast()
            for client_id in roster.table.live:
                roster.handles[client_id].start()

    def admit(
        self, client_id: int, handle: ClientHandle, node_id: str, first_round: int | None = None
    ) -> int | None:
        """Splice a new client in after a (seeded) random member and start it there.

        Its nearest live predecessor from an earlier round hands it, for ``init_from``, its
        state at the end of the round before the newcomer's first: ``first_round``, or the
        earliest round the ring cannot have begun. Returns the id of the member it follows;
        None when that round is past the run's last: a member with no round to train would
        hold the run open, waiting for a hand-off nobody sends.
        """
        with self.lock:
            roster = self.roster
            if client_id in roster.table.members:  # a retried admission changes nothing
                return self._predecessor(client_id)
            first_round = self.changes.entry_round(first_round)
            last = self.config.experiment.rounds - 1
            if first_round > last:
                detail = f"its first round {first_round} is past the run's last, {last}"
                self.changes.event(EventKind.JOIN_SKIPPED, client_id, first_round, detail)
                return None
            rng = random.Random(self.config.experiment.seed * 7919 + client_id)
            after = roster.table.place_for_joiner(rng)
            roster.admit(client_id, handle, node_id, after, first_round)
            self.changes.event(EventKind.JOIN, client_id, first_round, f"spliced in after {after}")
            self.recovery.checkpoint(force=True)  # written before anyone acts on the new member
            self.changes.broadcast()
            donor = roster.table.donor_for(client_id)
            handle.start(first_round, self.changes.hand_off(donor, client_id, first_round))
            return after

    def _predecessor(self, client_id: int) -> int:
        order = self.roster.table.order
        return order[order.index(client_id) - 1]

    def report_round(self, client_id: int, round_: int, metrics: dict[str, float]) -> None:
        with self.lock:
            roster = self.roster
            if client_id not in roster.table.members:
                return  # not a member of this run: nothing to record
            if client_id in roster.health.hung and not roster.table.is_live(client_id):
                self.availability.rejoin_hung(client_id)
            roster.reported(client_id, round_)
            if not self.results.has_round(client_id, round_):
                self.watch.pace.record(client_id, metrics)
            self.tracker.add_metrics(self.results.record_round(client_id, round_, metrics), round_)

    def report_event(
        self, kind: EventKind, client_id: int, round_: int, detail: str = "", **measured: float
    ) -> None:
        with self.lock:
            self.changes.event(kind, client_id, round_, detail, **measured)

    def report_unreachable(self, reporter: int, target: int, epoch: int) -> None:
        """A sender got no acknowledgement; the loop probes ``target`` before bypassing it."""
        with self.lock:
            members = self.roster.table.members
            if target not in members:
                return
            self.changes.event(
                EventKind.UNREACHABLE,
                target,
                members[target].last_round,
                f"reported by {reporter} at epoch {epoch}",
            )
            self.roster.suspect(target)

    def report_done(self, client_id: int, lost: int, hops: int, bytes_sent: int) -> None:
        with self.lock:
            if client_id not in self.roster.table.members:
                return
            self.results.done[client_id] = {"lost": lost, "hops": hops, "bytes_sent": bytes_sent}
            self.roster.finish(client_id)

    def report_failed(self, client_id: int, round_: int, error: str) -> None:
        """A client's round raised: record it with its traceback and apply the policy.

        ``drop`` bypasses the client as if it had crashed (its data leaves the run, the
        ring heals); ``stop`` ends the run. With no live member left, the run stops too.
        """
        with self.lock:
            if client_id not in self.roster.table.members:
                return
            self.results.errors.append({"client": client_id, "round": round_, "error": error})
            summary = error.strip().splitlines()[-1] if error.strip() else "error"
            self.changes.event(EventKind.CLIENT_ERROR, client_id, round_, summary)
            if self.config.schedule.on_client_error == "stop":
                self.changes.stop(f"client {client_id} failed in round {round_}: {summary}")
                return
            self.changes.mark_dead(client_id, EventKind.ERROR, summary)

    def progress(self) -> Progress:
        with self.lock:
            rounds = self.config.experiment.rounds
            return snapshot(self.roster.table, self.results, rounds, self.changes.stop_reason)

    def ring_order(self) -> list[int]:
        with self.lock:
            return self.roster.table.live

    # ---- reconcile ----------------------------------------------------------------------

    def reconcile(self) -> None:
        """One pass of every step; nothing in it waits on a client or on MLflow."""
        watch = self.watch
        for step in (
            watch.settle_probes,
            watch.start_probes,
            watch.rounds,
            self.availability.watch,
            watch.pace_of_members,
            self._reconcile_views,
            watch.heals,
            watch.round_means,
            self.recovery.checkpoint,
        ):
            try:
                with self.lock:
                    step()
            except Exception:  # one failing step must not stop the loop
                log.exception("coordinator step %s failed", step.__name__)
        try:
            self.outputs.write_partial()
        except Exception:
            log.exception("writing the run's tables failed")

    def _reconcile_views(self) -> None:
        """Broadcast a new view only when the epoch moved (after checkpointing it)."""
        if self.changes.view_due():
            self.recovery.checkpoint(force=True)
            self.changes.broadcast()

    # ---- the parts' own RPCs --------------------------------------------------------------

    def run_elapsed_s(self) -> float:
        return self.availability.run_elapsed_s()

    def leave(self, client_id: int, round_: int, off_s: float) -> None:
        self.availability.leave(client_id, round_, off_s)

    def come_back(self, client_id: int, round_: int) -> Readmission | None:
        return self.availability.come_back(client_id, round_)

    def rejoin(
        self, client_id: int, handle: ClientHandle, node_id: str, checkpoint_round: int | None
    ) -> Readmission | None:
        return self.availability.rejoin(client_id, handle, node_id, checkpoint_round)

    def checkpoint(self, force: bool = False) -> None:
        self.recovery.checkpoint(force)

    def restore(self, adopt_clients: bool = True) -> bool:
        return self.recovery.restore(adopt_clients)

    def resume_run(self) -> None:
        self.recovery.resume_run()

    def public_config(self) -> dict[str, Any]:
        return self.outputs.public_config()

    def open_tracking(self) -> None:
        self.outputs.open_tracking()

    def summary(self, wall_s: float) -> dict[str, Any]:
        return self.outputs.summary(wall_s)

    def finalize(self, wall_s: float) -> dict[str, Any]:
        return self.outputs.finalize(wall_s)
