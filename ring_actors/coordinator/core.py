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
from ring_actors.coordinator.health import Health
from ring_actors.coordinator.history import HistoryLog
from ring_actors.coordinator.membership import MembershipTable, MemberState
from ring_actors.coordinator.outputs import RunOutputs
from ring_actors.coordinator.pace import Pace
from ring_actors.coordinator.progress import Progress, snapshot
from ring_actors.coordinator.recovery import Recovery
from ring_actors.coordinator.results import Results
from ring_actors.coordinator.tracking import Tracker
from ring_actors.delivery.event_kinds import EventKind
from ring_actors.delivery.transport import ClientHandle, Joining
from ring_actors.heterogeneity.model import Heterogeneity
from ring_actors.storage.run_folder import RunFolder
from ring_actors.timeouts import Timeouts

log = logging.getLogger(__name__)


class CoordinatorCore(Availability, Recovery, RunOutputs):
    """One writer of membership and results; ``reconcile`` is one non-blocking pass."""

    def __init__(
        self,
        config: Config,
        output_dir: Path,
        tracker: Tracker,
        find_client: Callable[[int], ClientHandle | None] = lambda client_id: None,
    ) -> None:
        self.config = config
        self.timeouts = Timeouts.from_schedule(config.schedule)
        self.output_dir = output_dir
        self.checkpoint_path = RunFolder(output_dir).coordinator_record
        self.tracker = tracker
        self.find_client = find_client  # a restarted coordinator finds its clients again
        self.table = MembershipTable()
        self.handles: dict[int, ClientHandle] = {}
        self.lock = threading.RLock()
        self.results = Results(HistoryLog(RunFolder(output_dir).coordinator_history))
        self.health = Health()
        self.stop_reason: str | None = None
        self.broadcast_epoch = -1
        self.saved_at = 0.0
        self.outputs_at, self.outputs_cost_s = 0.0, 0.0
        self.rows_written, self.rounds_written = 0, 0
        schedule = config.schedule
        factors = Heterogeneity(
            config.heterogeneity, config.experiment.seed, config.total_clients
        ).factors
        self.pace = Pace(
            schedule.straggler_factor, schedule.straggler_window, dict(enumerate(factors))
        )
        self.speeds_block = -1  # the block of rounds whose speeds the views carry

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
            self.handles[client_id] = handle
            self.table.add(client_id, node_id)

    def adopt(self, client_id: int, handle: ClientHandle, node_id: str) -> bool:
        """A resumed run's new actor for a member the checkpoint knows; False if unknown."""
        with self.lock:
            member = self.table.members.get(client_id)
            if member is None:
                return False
            self.handles[client_id] = handle
            member.node_id = node_id
            return True

    def start_clients(self) -> None:
        """Push every member its first view, then start all round loops."""
        with self.lock:
            self.results.started_at = time.monotonic()
            for client_id in self.table.live:
                self.table.mark(client_id, MemberState.RUNNING)
                self.health.heard(client_id)
            self._watch_pace()  # the configured speeds, for the first view
            self.checkpoint(force=True)
            self._broadcast()
            for client_id in self.table.live:
                self.handles[client_id].start()

    def admit(
        self, client_id: int, handle: ClientHandle, node_id: str, first_round: int | None = None
    ) -> int:
        """Splice a new client in after a (seeded) random member and start it there.

        Its nearest live predecessor from an earlier round hands it, for ``init_from``, its
        state at the end of the round before the newcomer's first: ``first_round``, or the
        earliest round the ring cannot have begun. Returns the id of the member it follows.
        """
        with self.lock:
            if client_id in self.table.members:  # a retried admission changes nothing
                return self._predecessor(client_id)
            rng = random.Random(self.config.experiment.seed * 7919 + client_id)
            after = self.table.place_for_joiner(rng)
            first_round = self._entry_round(first_round)
            self.handles[client_id] = handle
            self.table.add(client_id, node_id, after=after, first_round=first_round)
            self.table.mark(client_id, MemberState.RUNNING)
            self.health.heard(client_id)
            self._event(EventKind.JOIN, client_id, first_round, f"spliced in after {after}")
            self.checkpoint(force=True)  # written before anyone acts on the new member
            self._broadcast()
            donor = self.table.donor_for(client_id)
            handle.start(first_round, self._hand_off(donor, client_id, handle, first_round))
            return after

    def _hand_off(
        self, donor: int | None, client_id: int, handle: ClientHandle, first_round: int
    ) -> Joining:
        """Ask ``donor`` to hand the newcomer its state at the end of the round before
        ``first_round`` (the same state however late the request reaches it), unless
        newcomers start fresh; what the newcomer waits for."""
        if donor is None or self.config.clients.join_start != "hand_off":
            return Joining(None)
        self.handles[donor].hand_off(client_id, handle, first_round - 1)
        return Joining(donor)

    def _predecessor(self, client_id: int) -> int:
        order = self.table.order
        return order[order.index(client_id) - 1]

    def _entry_round(self, wanted: int | None = None) -> int:
        """The first round a client spliced in now trains: ``wanted`` if the ring cannot
        have begun it. A member that reported round n may be in round n + 1 with its lap
        even finished, so a newcomer there would wait for a lap that never comes. Round
        n + 2 is safe: its lap needs every member to finish n + 1 first, and the new view
        reaches them long before.
        """
        return max(wanted or 0, self.table.newest_trained + 2)

    def report_round(self, client_id: int, round_: int, metrics: dict[str, float]) -> None:
        with self.lock:
            if client_id not in self.table.members:
                return  # not a member of this run: nothing to record
            if client_id in self.health.hung and not self.table.is_live(client_id):
                self._rejoin(client_id)
            self.table.seen(client_id, round_)
            self.health.heard(client_id)
            if not self.results.has_round(client_id, round_):
                self.pace.record(client_id, metrics)
            self.tracker.add_metrics(self.results.record_round(client_id, round_, metrics), round_)

    def report_event(
        self, kind: EventKind, client_id: int, round_: int, detail: str = "", **measured: float
    ) -> None:
        with self.lock:
            self._event(kind, client_id, round_, detail, **measured)

    def report_unreachable(self, reporter: int, target: int, epoch: int) -> None:
        """A sender got no acknowledgement; the loop probes ``target`` before bypassing it."""
        with self.lock:
            if target not in self.table.members:
                return
            self._event(
                EventKind.UNREACHABLE,
                target,
                self.table.members[target].last_round,
                f"reported by {reporter} at epoch {epoch}",
            )
            self.health.suspects.add(target)

    def report_done(self, client_id: int, lost: int, hops: int, bytes_sent: int) -> None:
        with self.lock:
            if client_id not in self.table.members:
                return
            self.results.done[client_id] = {"lost": lost, "hops": hops, "bytes_sent": bytes_sent}
            self.table.mark(client_id, MemberState.DONE)

    def report_failed(self, client_id: int, round_: int, error: str) -> None:
        """A client's round raised: record it with its traceback and apply the policy.

        ``drop`` bypasses the client as if it had crashed (its data leaves the run, the
        ring heals); ``stop`` ends the run. With no live member left, the run stops too.
        """
        with self.lock:
            if client_id not in self.table.members:
                return
            self.results.errors.append({"client": client_id, "round": round_, "error": error})
            summary = error.strip().splitlines()[-1] if error.strip() else "error"
            self._event(EventKind.CLIENT_ERROR, client_id, round_, summary)
            if self.config.schedule.on_client_error == "stop":
                self._stop(f"client {client_id} failed in round {round_}: {summary}")
                return
            self._mark_dead(client_id, EventKind.ERROR, summary)

    def progress(self) -> Progress:
        with self.lock:
            rounds = self.config.experiment.rounds
            return snapshot(self.table, self.results, rounds, self.stop_reason)

    def ring_order(self) -> list[int]:
        with self.lock:
            return self.table.live

    # ---- reconcile ----------------------------------------------------------------------

    def reconcile(self) -> None:
        """One pass of every step; nothing in it waits on a client or on MLflow."""
        for step in (
            self._settle_probes,
            self._start_probes,
            self._watch_rounds,
            self._watch_availability,
            self._watch_pace,
            self._reconcile_views,
            self._settle_heals,
            self._log_round_means,
            self.checkpoint,
        ):
            try:
                with self.lock:
                    step()
            except Exception:  # one failing step must not stop the loop
                log.exception("coordinator step %s failed", step.__name__)
        try:
            self._write_partial_outputs()
        except Exception:
            log.exception("writing the run's tables failed")

    def _settle_probes(self) -> None:
        deaths = self.health.settle_probes(self.table, self.handles, self.timeouts.probe_s)
        for client_id, cause, detail in deaths:
            self._mark_dead(client_id, cause, detail)

    def _start_probes(self) -> None:
        self.health.start_probes(self.table.live, self.handles, self.config.schedule.heartbeat_s)

    def _watch_rounds(self) -> None:
        """A running member that answers pings but finishes no round for the stall time is
        hung all the same (a method stuck in a loop). When every member still running stalls
        and none has finished, nothing advances: the run stops. Members that finished show
        the ring worked; then the stalled ones are bypassed and the run ends with the rest."""
        if self.stop_reason is not None:
            return
        limit = self.timeouts.stall_s
        states = {c: self.table.members[c].state for c in self.table.live}
        running = [c for c, state in states.items() if state == MemberState.RUNNING]
        finished = [c for c, state in states.items() if state == MemberState.DONE]
        stalled = self.health.stalled(running, limit)
        if stalled and len(stalled) == len(running) and not finished:
            diagnosis = self.health.diagnosis(self.table, self.results.started_at)
            self._stop(f"no member finished a round for {limit:g} s: {diagnosis}")
            return
        for client_id in stalled:
            self._mark_dead(client_id, EventKind.HANG, f"no round finished in {limit:g} s")
            self.health.hung.add(client_id)

    def _watch_pace(self) -> None:
        """Mark and unmark stragglers (each an event), and refresh the speeds the views
        carry once per block of ``topology.resample_every`` rounds when a topology samples
        by them; either change bumps the epoch, so the next step broadcasts it."""
        live = self.table.live
        before = self.table.stragglers
        now = self.pace.stragglers(live, before)
        ring_s = self.pace.ring_median_s(live) or 0.0
        for client_id in sorted(now ^ before):
            kind = EventKind.STRAGGLER if client_id in now else EventKind.STRAGGLER_CLEARED
            own_s = self.pace.median_s(client_id) or 0.0
            detail = f"own round {own_s:.3g} s, the median member's {ring_s:.3g} s"
            round_ = self.table.members[client_id].last_round
            self._event(kind, client_id, round_, detail, own_s=own_s, ring_s=ring_s)
        speeds = self.table.speeds
        block = max(0, self.table.newest_trained) // self.config.topology.resample_every
        if self.config.topology.similarity > 0 and block != self.speeds_block:
            speeds, self.speeds_block = self.pace.speeds(live), block
        self.table.set_pace(now, speeds)

    def _reconcile_views(self) -> None:
        """Broadcast a new view only when the epoch moved (after checkpointing it)."""
        if self.table.epoch != self.broadcast_epoch:
            self.checkpoint(force=True)
            self._broadcast()

    def _settle_heals(self) -> None:
        """A bypass has healed once every live member finished a round it began after it;
        the event records how long that took."""
        live = self.table.live
        if not live:
            return
        slowest = min(self.table.members[c].last_round for c in live)
        now = self.results.now()
        for bypassed_at, target in self.health.healed(slowest):
            detail = "every live member passed the bypass"
            self._event(EventKind.HEALED, -1, target, detail, latency_s=now - bypassed_at)

    def _log_round_means(self) -> None:
        for round_, means in self.results.full_round_means(set(self.table.live)):
            self.tracker.add_metrics(means, round_)

    # ---- helpers ------------------------------------------------------------------------

    def _broadcast(self) -> None:
        """One view for everyone: neighbour sets are derived from it, per round, by each client."""
        view = self.table.view()
        handles = {c: self.handles[c] for c in view.members}
        for client_id in view.members:
            self.handles[client_id].set_view(view, handles)
        self.broadcast_epoch = view.epoch

    def _mark_dead(self, client_id: int, cause: EventKind, detail: str) -> None:
        """Bypass a member for good (unless it comes back itself); one offline leaves no ring."""
        if self.table.members[client_id].state == MemberState.DEAD:
            return
        was_live = self.table.is_live(client_id)
        self.table.mark(client_id, MemberState.DEAD)
        self._left_ring(client_id, was_live, cause, detail)

    def _left_ring(self, client_id: int, was_live: bool, cause: EventKind, detail: str) -> None:
        """The events of a member gone dead or offline; its event's latency is the time since
        it was last heard from (a bound on the detection latency: the fault came after its
        last sign of life). The run stops once no member is left, live or due back."""
        member = self.table.members[client_id]
        self.health.suspects.discard(client_id)
        silent = time.monotonic() - member.last_seen
        self._event(cause, client_id, member.last_round, detail, latency_s=silent)
        live = self.table.live
        if was_live:
            self._event(EventKind.BYPASS, client_id, member.last_round, f"ring now {live}")
            if live:
                newest = max(self.table.members[c].last_round for c in live)
                self.health.bypassed(self.results.now(), newest + 1)
        if not self.table.remaining:  # nobody left to train, report or be probed
            self._stop(
                f"no client can go on: no live client left (the last, client "
                f"{client_id}: {cause}, {detail})"
            )

    def _stop(self, reason: str) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason
            self._event(EventKind.RUN_STOPPED, -1, -1, reason)

    def _event(
        self, kind: EventKind, client_id: int, round_: int, detail: str, **measured: float
    ) -> None:
        self.results.event(kind, client_id, round_, self.table.epoch, detail, **measured)
