"""The changes every member acts on, made in one place: views broadcast, members bypassed,
hand-offs asked of donors, the run stopped, and each recorded as an event. The coordinator's
other parts find facts; this part turns them into changes."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from ring_actors.config import Config
from ring_actors.coordinator.membership import MemberState
from ring_actors.coordinator.results import Results
from ring_actors.coordinator.roster import Roster
from ring_actors.delivery.event_kinds import EventKind
from ring_actors.delivery.transport import Joining

log = logging.getLogger(__name__)


@dataclass(eq=False)
class RingChanges:
    """The one writer of views, bypasses and the stop; callers hold the coordinator's lock."""

    config: Config
    roster: Roster
    results: Results
    stop_reason: str | None = field(default=None, init=False)
    broadcast_epoch: int = field(default=-1, init=False)
    # Views go out once the ring has started: one sent while the launch still registers
    # members is partial, and its members would act on it (a lap group of two, say).
    ring_started: bool = field(default=False, init=False)

    def event(
        self, kind: EventKind, client_id: int, round_: int, detail: str, **measured: float
    ) -> None:
        self.results.event(kind, client_id, round_, self.roster.table.epoch, detail, **measured)

    def broadcast(self) -> None:
        """One view for everyone: neighbour sets are derived from it, per round, by each client."""
        view, handles = self.roster.view_with_handles()
        for handle in handles.values():
            handle.set_view(view, handles)
        self.broadcast_epoch = view.epoch
        self.ring_started = True

    def view_due(self) -> bool:
        """Whether the members act on an older view than the table's."""
        return self.ring_started and self.roster.table.epoch != self.broadcast_epoch

    def hand_off(self, donor: int | None, client_id: int, first_round: int) -> Joining:
        """Ask ``donor`` to hand the newcomer its state at the end of the round before
        ``first_round`` (the same state however late the request reaches it), unless
        newcomers start fresh; what the newcomer waits for."""
        if donor is None or self.config.clients.join_start != "hand_off":
            return Joining(None)
        handles = self.roster.handles
        handles[donor].hand_off(client_id, handles[client_id], first_round - 1)
        return Joining(donor)

    def entry_round(self, wanted: int | None = None, returning: int | None = None) -> int:
        """The first round a client spliced in now trains: ``wanted`` if the ring cannot
        have begun it. A member that reported round n may be in round n + 1 with its lap
        even finished, so a newcomer there would wait for a lap that never comes. Round
        n + 2 is safe: its lap needs every member to finish n + 1 first, and the new view
        reaches them long before. A member ``returning`` from offline was in no lap while
        away: its own rounds do not count as the others', so a front-runner skips none.
        """
        return max(wanted or 0, self.roster.table.newest_trained_by_others(returning) + 2)

    def mark_dead(self, client_id: int, cause: EventKind, detail: str) -> None:
        """Bypass a member for good (unless it comes back itself); one offline leaves no ring.
        A member bypassed as hung (``HANG``: silent, not gone) may come back with a report."""
        if self.roster.table.members[client_id].state == MemberState.DEAD:
            return
        was_live = self.roster.mark_dead(client_id, hung=cause == EventKind.HANG)
        self.left_ring(client_id, was_live, cause, detail)

    def left_ring(self, client_id: int, was_live: bool, cause: EventKind, detail: str) -> None:
        """The events of a member gone dead or offline; its event's latency is the time since
        it was last heard from (a bound on the detection latency: the fault came after its
        last sign of life). The run stops once no member is left, live or due back."""
        table = self.roster.table
        member = table.members[client_id]
        silent = time.monotonic() - member.last_seen
        self.event(cause, client_id, member.last_round, detail, latency_s=silent)
        if was_live:
            self.event(EventKind.BYPASS, client_id, member.last_round, f"ring now {table.live}")
            self.roster.bypass(self.results.now())
        if not table.remaining:  # nobody left to train, report or be probed
            self.stop(
                f"no client can go on: no live client left (the last, client "
                f"{client_id}: {cause}, {detail})"
            )

    def stop(self, reason: str) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason
            self.event(EventKind.RUN_STOPPED, -1, -1, reason)
