"""The reconcile steps that watch the members: probes and their answers, stalled rounds,
stragglers and the speeds the views carry, healed bypasses, and the rounds' means for MLflow.
What they find becomes a change through :class:`~ring_actors.coordinator.changes.RingChanges`."""

from __future__ import annotations

from dataclasses import dataclass

from ring_actors.config import Config
from ring_actors.coordinator.changes import RingChanges
from ring_actors.coordinator.membership import MemberState
from ring_actors.coordinator.pace import Pace
from ring_actors.coordinator.results import Results
from ring_actors.coordinator.roster import Roster
from ring_actors.coordinator.untracked import RunTracker
from ring_actors.delivery.event_kinds import EventKind
from ring_actors.heterogeneity.model import Heterogeneity
from ring_actors.timeouts import Timeouts


@dataclass(eq=False)
class Watch:
    """Each step is one non-blocking look; callers hold the coordinator's lock."""

    config: Config
    timeouts: Timeouts
    roster: Roster
    results: Results
    tracker: RunTracker
    changes: RingChanges

    def __post_init__(self) -> None:
        schedule = self.config.schedule
        factors = Heterogeneity(
            self.config.heterogeneity, self.config.experiment.seed, self.config.total_clients
        ).factors
        self.pace = Pace(
            schedule.straggler_factor, schedule.straggler_window, dict(enumerate(factors))
        )
        self.speeds_block = -1  # the block of rounds whose speeds the views carry

    def settle_probes(self) -> None:
        roster = self.roster
        deaths = roster.health.settle_probes(roster.table, roster.handles, self.timeouts.probe_s)
        for client_id, cause, detail in deaths:
            self.changes.mark_dead(client_id, cause, detail)

    def start_probes(self) -> None:
        roster, heartbeat_s = self.roster, self.config.schedule.heartbeat_s
        roster.health.start_probes(roster.table.live, roster.handles, heartbeat_s)

    def rounds(self) -> None:
        """A running member that answers pings but finishes no round for the stall time is
        hung all the same (a method stuck in a loop). When every member still running stalls
        and none has finished, nothing advances: the run stops. Members that finished show
        the ring worked; then the stalled ones are bypassed and the run ends with the rest."""
        if self.changes.stop_reason is not None:
            return
        limit, table, health = self.timeouts.stall_s, self.roster.table, self.roster.health
        states = {c: table.members[c].state for c in table.live}
        running = [c for c, state in states.items() if state == MemberState.RUNNING]
        finished = [c for c, state in states.items() if state == MemberState.DONE]
        stalled = health.stalled(running, limit)
        if stalled and len(stalled) == len(running) and not finished:
            diagnosis = health.diagnosis(table, self.results.started_at)
            self.changes.stop(f"no member finished a round for {limit:g} s: {diagnosis}")
            return
        for client_id in stalled:
            self.changes.mark_dead(client_id, EventKind.HANG, f"no round finished in {limit:g} s")

    def pace_of_members(self) -> None:
        """Mark and unmark stragglers (each an event), and refresh the speeds the views
        carry once per block of ``topology.resample_every`` rounds when a topology samples
        by them; either change bumps the epoch, so the next step broadcasts it."""
        table = self.roster.table
        live = table.live
        before = table.stragglers
        now = self.pace.stragglers(live, before)
        ring_s = self.pace.ring_median_s(live) or 0.0
        for client_id in sorted(now ^ before):
            kind = EventKind.STRAGGLER if client_id in now else EventKind.STRAGGLER_CLEARED
            own_s = self.pace.median_s(client_id) or 0.0
            detail = f"own round {own_s:.3g} s, the median member's {ring_s:.3g} s"
            round_ = table.members[client_id].last_round
            self.changes.event(kind, client_id, round_, detail, own_s=own_s, ring_s=ring_s)
        speeds = table.speeds
        block = max(0, table.newest_trained) // self.config.topology.resample_every
        if self.config.topology.similarity > 0 and block != self.speeds_block:
            speeds, self.speeds_block = self.pace.speeds(live), block
        table.set_pace(now, speeds)

    def heals(self) -> None:
        """A bypass has healed once every live member finished a round it began after it;
        the event records how long that took."""
        now = self.results.now()
        for bypassed_at, target in self.roster.heal():
            detail = "every live member passed the bypass"
            self.changes.event(EventKind.HEALED, -1, target, detail, latency_s=now - bypassed_at)

    def round_means(self) -> None:
        for round_, means in self.results.full_round_means(set(self.roster.table.live)):
            self.tracker.add_metrics(means, round_)
