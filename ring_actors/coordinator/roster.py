"""The coordinator's roster: the membership table, each member's client handle and the
health records, owned together so that a membership change updates all three at once.

The coordinator's parts hold the roster, never its pieces: a restore replaces the pieces in
one call, and every part reads the restored ones through the roster it holds.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ring_actors.coordinator.health import Health
from ring_actors.coordinator.membership import MembershipTable, MemberState
from ring_actors.delivery.transport import ClientHandle
from ring_actors.delivery.view import View


class Roster:
    """Who is in the run, how to reach each member and how alive each looks; each method is
    one transition of a member. Callers hold the coordinator's lock."""

    def __init__(self) -> None:
        self.table = MembershipTable()
        self.handles: dict[int, ClientHandle] = {}
        self.health = Health()

    def view_with_handles(self) -> tuple[View, dict[int, ClientHandle]]:
        """The current view and its members' handles: what a member needs to act on it."""
        view = self.table.view()
        return view, {c: self.handles[c] for c in view.members}

    # ---- joining ------------------------------------------------------------------------

    def register(self, client_id: int, handle: ClientHandle, node_id: str) -> None:
        """A client of the launch, at the end of the ring order; it starts with the others."""
        self.handles[client_id] = handle
        self.table.add(client_id, node_id)

    def adopt(self, client_id: int, handle: ClientHandle, node_id: str) -> bool:
        """A resumed run's new actor for a member the record knows; False if unknown."""
        member = self.table.members.get(client_id)
        if member is None:
            return False
        self.handles[client_id] = handle
        member.node_id = node_id
        return True

    def start(self, client_id: int) -> None:
        """A member's round loop starts: running, its stall clock from now."""
        self.table.mark(client_id, MemberState.RUNNING)
        self.health.heard(client_id)

    def admit(
        self, client_id: int, handle: ClientHandle, node_id: str, after: int, first_round: int
    ) -> None:
        """A joiner spliced in after ``after``, running from ``first_round``."""
        self.handles[client_id] = handle
        self.table.add(client_id, node_id, after=after, first_round=first_round)
        self.start(client_id)

    # ---- what members report ------------------------------------------------------------

    def reported(self, client_id: int, round_: int) -> None:
        """A member finished ``round_``: seen now, its stall clock starts again."""
        self.table.seen(client_id, round_)
        self.health.heard(client_id)

    def suspect(self, client_id: int) -> None:
        """A sender got no acknowledgement from the member: it is probed at once."""
        self.health.suspects.add(client_id)

    def finish(self, client_id: int) -> None:
        """A member trained its last round; it stays live, still receiving."""
        self.table.mark(client_id, MemberState.DONE)

    # ---- away and back ------------------------------------------------------------------

    def go_offline(self, client_id: int, due_back_s: float) -> bool:
        """A live member leaves for an off period; True when it left the ring."""
        self.health.forget(client_id)  # a probe sent before it left must not write it off
        return self.table.go_offline(client_id, due_back_s)

    def come_back(
        self, client_id: int, first_round: int, handle: ClientHandle | None = None
    ) -> bool:
        """A member heard from again, in ``handle`` when given; one offline takes its own place
        again, training from ``first_round``: True then (the epoch bumped)."""
        if handle is not None:
            self.handles[client_id] = handle
        if not self.table.come_back(client_id, first_round):
            return False
        self.health.heard(client_id)
        return True

    def resume(self, client_id: int) -> None:
        """A resumed run's live member goes on in the view it had: running, the epoch kept."""
        self.table.members[client_id].state = MemberState.RUNNING
        self.health.heard(client_id)

    # ---- bypassed and healed ------------------------------------------------------------

    def mark_dead(self, client_id: int, hung: bool = False) -> bool:
        """Bypass a member for good, unless it comes back itself; one ``hung`` (silent, not
        gone) may also come back with a late report. True when it left the ring."""
        if self.table.members[client_id].state == MemberState.DEAD:
            return False
        self.health.suspects.discard(client_id)
        if hung:
            self.health.hung.add(client_id)
        return self.table.mark(client_id, MemberState.DEAD)

    def bypass(self, at_s: float) -> None:
        """The ring closed over a member at ``at_s``: it has healed once every live member
        finished a round it began after that (none to wait for with nobody live)."""
        live = self.table.live
        if live:
            newest = max(self.table.members[c].last_round for c in live)
            self.health.bypassed(at_s, newest + 1)

    def heal(self) -> list[tuple[float, int]]:
        """The bypasses every live member has now passed: (when it was, its heal round)."""
        live = self.table.live
        if not live:
            return []
        return self.health.healed(min(self.table.members[c].last_round for c in live))

    # ---- back in the ring ---------------------------------------------------------------

    def rejoin(
        self, client_id: int, handle: ClientHandle, node_id: str, after: int, first_round: int
    ) -> None:
        """A restarted member's new process spliced in after ``after``, from
        ``first_round``; its stall clock starts."""
        self.handles[client_id] = handle
        self.table.members[client_id].node_id = node_id
        self.table.revive(client_id, after, first_round)
        self.health.heard(client_id)

    def revive(self, client_id: int, after: int) -> None:
        """A member bypassed as hung is heard from again, with its private state: spliced in
        after ``after``; nothing known of it from before applies."""
        self.table.revive(client_id, after)
        self.health.forget(client_id)

    # ---- the coordinator's own restart --------------------------------------------------

    def restore(
        self, table: dict[str, Any], hung: Iterable[int], healing: Iterable[tuple[float, int]]
    ) -> None:
        """Replace everything with a record's: its table, its hung members and unhealed
        bypasses; no handles (a restarted coordinator finds its members' actors again)."""
        self.table = MembershipTable.from_record(table)
        self.handles = {}
        self.health = Health()
        self.health.hung, self.health.healing = set(hung), list(healing)

    def reconnect(self, client_id: int, handle: ClientHandle) -> None:
        """A restarted coordinator found a live member's actor: its stall clock from now."""
        self.handles[client_id] = handle
        self.health.heard(client_id)
