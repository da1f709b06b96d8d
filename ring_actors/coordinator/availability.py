"""Members away and back: offline for an off period of the availability model, restarted
after a crash, or bypassed as hung and heard from again.

An offline member is out of the views (nobody waits for it) but not written off: it keeps its
place in the ring order, the health checks leave it alone, and the run goes on while it is
away, even with every member away at once, until the first comes back. Two things end that
wait: no member due back before the time budget ends (the run stops, saying so), and a member
overdue by the stall limit (bypassed as hung; the last one gone stops the run).
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from ring_actors.config import Config
from ring_actors.coordinator.changes import RingChanges
from ring_actors.coordinator.membership import MemberState
from ring_actors.coordinator.results import Results
from ring_actors.coordinator.roster import Roster
from ring_actors.delivery.event_kinds import EventKind
from ring_actors.delivery.transport import ClientHandle, Joining, Readmission
from ring_actors.timeouts import Timeouts


class Checkpoints(Protocol):
    """Where a change is saved before anyone acts on it (the coordinator's record)."""

    def checkpoint(self, force: bool = False) -> None: ...


@dataclass(eq=False)
class Availability:
    """Leaving and coming back, under the coordinator's lock."""

    config: Config
    timeouts: Timeouts
    lock: threading.RLock
    roster: Roster
    find_client: Callable[[int], ClientHandle | None]
    results: Results
    changes: RingChanges
    record: Checkpoints

    def run_elapsed_s(self) -> float:
        """Seconds of the run so far, on the clock the coordinator starts once (and keeps
        across its own restart and a resumed run): every client, a restarted one, a resumed
        one and a joiner included, measures its time budget and off periods on it."""
        with self.lock:
            return self.results.now()

    def leave(self, client_id: int, round_: int, off_s: float) -> None:
        """A client goes offline for ``off_s``: out of the ring at once, not probed; it
        comes back itself."""
        with self.lock:
            table = self.roster.table
            if client_id not in table.members or not table.is_live(client_id):
                return
            due_s = self.results.now() + off_s
            detail = f"for {off_s:.2f} s, due back at {due_s:.2f} s"
            self.changes.event(EventKind.OFFLINE, client_id, round_, detail, duration_s=off_s)
            self.roster.go_offline(client_id, due_s)
            self.changes.left_ring(client_id, True, EventKind.LEAVE, "offline")

    def come_back(self, client_id: int, round_: int) -> Readmission | None:
        """A client back from offline, with its state, in its own place again: from the
        first round the ring cannot have begun. One bypassed meanwhile (overdue) is spliced
        in as a restarted one is; one whose leave never arrived goes on where it is."""
        with self.lock:
            roster = self.roster
            member = roster.table.members.get(client_id)
            if member is None:
                return None
            handle = roster.handles.get(client_id) or self.find_client(client_id)
            if handle is None:
                return None
            if member.state == MemberState.DEAD:
                node_id = member.node_id
            else:
                first_round = self.changes.entry_round(member.last_round + 1, client_id)
                if roster.come_back(client_id, first_round, handle):
                    detail = f"back from offline, from round {first_round}"
                    self.changes.event(EventKind.REJOIN, client_id, first_round, detail)
                    self.record.checkpoint(force=True)
                    self.changes.broadcast()
                return Readmission(member.first_round, None, *roster.view_with_handles())
        return self.rejoin(client_id, handle, node_id, round_)

    def rejoin(
        self, client_id: int, handle: ClientHandle, node_id: str, checkpoint_round: int | None
    ) -> Readmission | None:
        """A crashed client that was restarted is spliced in again; it starts itself from
        the answer. With a checkpoint it resumes its private state; without one it starts
        as a newcomer from its predecessor's hand-off. None when nobody is left to join.
        """
        with self.lock:
            roster = self.roster
            if roster.table.is_live(client_id):  # back before the probes noticed it was gone
                self.changes.mark_dead(client_id, EventKind.CRASH, "restarted")
            roster.health.forget(client_id)  # placed or not, its old process is gone
            after = self._place_for(client_id)
            if after is None:
                return None
            first_round = self.changes.entry_round()
            roster.rejoin(client_id, handle, node_id, after, first_round)
            how = (
                "as a new client" if checkpoint_round is None else f"from round {checkpoint_round}"
            )
            self.changes.event(EventKind.REJOIN, client_id, first_round, f"after {after}, {how}")
            self.record.checkpoint(force=True)
            self.changes.broadcast()
            joining: Joining | None = None
            if checkpoint_round is None:
                joining = self.changes.hand_off(after, client_id, first_round)
            return Readmission(first_round, joining, *roster.view_with_handles())

    def rejoin_hung(self, client_id: int) -> None:
        """A member bypassed as hung is back, with its private state: splice it in again
        (unless the run stopped when its last member left: no ring to come back to)."""
        after = self._place_for(client_id)
        if after is None:
            return
        self.roster.revive(client_id, after)
        round_ = self.roster.table.members[client_id].last_round
        self.changes.event(EventKind.REJOIN, client_id, round_, f"spliced in after {after}")

    def _place_for(self, client_id: int) -> int | None:
        """The (seeded) member a returning one is spliced in after: a live one, or with
        every member offline one due back; None when the run has nobody else."""
        table = self.roster.table
        others = table.live or [c for c in table.remaining if c != client_id]
        return random.Random(table.epoch).choice(others) if others else None

    def watch(self) -> None:
        """Bypass members overdue from offline by the stall limit, as hung (a late report
        still brings one back); with every member offline, stop when none is due back
        before the time budget ends."""
        if self.changes.stop_reason is not None:
            return
        now, limit, table = self.results.now(), self.timeouts.stall_s, self.roster.table
        members = table.members
        for client_id in table.offline:
            due_s = members[client_id].due_back_s or 0.0
            if now - due_s > limit:
                detail = f"not back from offline: due at {due_s:.2f} s, {limit:g} s before"
                self.changes.mark_dead(client_id, EventKind.HANG, detail)
        away, budget = table.offline, self.config.experiment.time_budget_s
        if table.live or not away or budget is None or self.changes.stop_reason is not None:
            return
        first = min(away, key=lambda c: members[c].due_back_s or 0.0)
        due_s = members[first].due_back_s or 0.0
        if due_s >= budget:
            self.changes.stop(
                f"no client can go on: every client is offline past the time budget "
                f"({budget:g} s); the first due back, client {first}, at {due_s:.2f} s"
            )
