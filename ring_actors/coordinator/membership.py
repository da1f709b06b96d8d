"""The coordinator's membership table: who is in the ring, in which order, at which epoch.

A member is live (in the ring: views carry it), offline (out of the ring for an off period of
the availability model, due back, keeping its place in the order) or dead (bypassed for good,
unless a restart or a late report brings it back)."""

from __future__ import annotations

import enum
import random
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from ring_actors.delivery.view import View


class MemberState(enum.Enum):
    STARTING = "starting"
    RUNNING = "running"
    DONE = "done"
    OFFLINE = "offline"  # away for an off period: nobody waits for it, nobody writes it off
    DEAD = "dead"


@dataclass
class Member:
    client_id: int
    node_id: str = ""
    state: MemberState = MemberState.STARTING
    first_round: int = 0
    last_round: int = -1
    last_seen: float = field(default_factory=time.monotonic)
    due_back_s: float | None = None  # while offline: when it is due back, on the run's clock
    trained_before: int = 0  # rounds it finished before its latest ``first_round``

    @property
    def rounds_trained(self) -> int:
        """Rounds this member has finished itself; a joiner's skipped rounds do not count,
        the rounds it trained before an off period or a restart do."""
        return self.trained_before + max(0, self.last_round + 1 - self.first_round)

    def restart_at(self, first_round: int) -> None:
        """Train from ``first_round`` on, keeping the count of the rounds trained before it
        (those from it on count once they are reported again)."""
        again = max(0, self.last_round + 1 - first_round)
        self.trained_before = self.rounds_trained - again
        self.first_round = first_round


class MembershipTable:
    """Members in ring order; every change to the live set, the stragglers or the speeds
    bumps the epoch (so that every client acts on the same view).

    Pure bookkeeping with no Ray calls, so the state machine is testable on its own.
    """

    def __init__(self) -> None:
        self.members: dict[int, Member] = {}
        self.order: list[int] = []
        self.epoch = 0
        self.members_since = 0  # the epoch the live members or their first rounds last changed
        self.stragglers: frozenset[int] = frozenset()
        self.speeds: dict[int, float] = {}

    def add(
        self, client_id: int, node_id: str = "", after: int | None = None, first_round: int = 0
    ) -> None:
        """Insert a member after ``after`` in ring order (at the end when None)."""
        if client_id in self.members:
            return  # idempotent: a retried join changes nothing
        self.members[client_id] = Member(client_id, node_id, first_round=first_round)
        self.members[client_id].last_round = first_round - 1
        position = len(self.order) if after is None else self.order.index(after) + 1
        self.order.insert(position, client_id)
        self._members_changed()

    def mark(self, client_id: int, state: MemberState) -> bool:
        """Move a member to ``state``; True when the live set changed (epoch bumped)."""
        member = self.members[client_id]
        if member.state == state or member.state == MemberState.DEAD:
            return False
        was_live = self.is_live(client_id)
        member.state = state
        member.due_back_s = None  # only ``go_offline`` sets it
        changed = was_live != self.is_live(client_id)
        if changed:
            self._members_changed()
        return changed

    def go_offline(self, client_id: int, due_back_s: float) -> bool:
        """A live member leaves for an off period, due back at ``due_back_s``; True when it
        left the ring (epoch bumped)."""
        if not self.is_live(client_id):
            return False
        self.mark(client_id, MemberState.OFFLINE)
        self.members[client_id].due_back_s = due_back_s
        return True

    def come_back(self, client_id: int, first_round: int) -> bool:
        """An offline member is back in its own place, training from ``first_round``; True
        when it was offline (epoch bumped)."""
        member = self.members[client_id]
        if member.state != MemberState.OFFLINE:
            return False
        member.restart_at(first_round)
        return self.mark(client_id, MemberState.RUNNING)

    def revive(self, client_id: int, after: int, first_round: int | None = None) -> None:
        """A member declared dead (or one that was offline, now in a new process) is back:
        splice it in after ``after`` (from ``first_round``)."""
        member = self.members[client_id]
        if member.state not in (MemberState.DEAD, MemberState.OFFLINE):
            return
        member.state, member.due_back_s = MemberState.RUNNING, None
        if first_round is not None:
            member.restart_at(first_round)
        self.order.remove(client_id)
        self.order.insert(self.order.index(after) + 1, client_id)
        self._members_changed()

    def _members_changed(self) -> None:
        self.epoch += 1
        self.members_since = self.epoch

    def place_for_joiner(self, rng: random.Random) -> int:
        """The member a joiner is spliced in after: drawn from every member, live or not, so
        the place follows from the seed and the plan's joins alone, never from which
        members had reported or been bypassed when the join came (a resumed run or a rerun
        builds the same ring)."""
        return rng.choice(sorted(self.members))

    def donor_for(self, client_id: int) -> int | None:
        """Who hands a member just spliced in its state: its nearest live predecessor that
        trains from an earlier round (so it ends the round before the newcomer's first);
        None when no such member is live. Ring order and first rounds decide, never the
        order reports arrived in, so a rerun of the same plan picks the same donor."""
        at = self.order.index(client_id)
        before = [self.order[(at - k) % len(self.order)] for k in range(1, len(self.order))]
        first = self.members[client_id].first_round
        earlier = (c for c in before if self.is_live(c) and self.members[c].first_round < first)
        return next(earlier, None)

    def set_pace(self, stragglers: frozenset[int], speeds: dict[int, float]) -> bool:
        """New stragglers or speeds for the views; True when they changed (epoch bumped)."""
        if stragglers == self.stragglers and speeds == self.speeds:
            return False
        self.stragglers, self.speeds = stragglers, dict(speeds)
        self.epoch += 1
        return True

    def is_live(self, client_id: int) -> bool:
        """Live members take part in the ring (a finished member still receives)."""
        return self.members[client_id].state not in (MemberState.DEAD, MemberState.OFFLINE)

    @property
    def live(self) -> list[int]:
        return [c for c in self.order if self.is_live(c)]

    @property
    def offline(self) -> list[int]:
        return [c for c in self.order if self.members[c].state == MemberState.OFFLINE]

    @property
    def remaining(self) -> list[int]:
        """Members the run still has: the live ones and those offline, due back."""
        return [c for c in self.order if self.members[c].state != MemberState.DEAD]

    @property
    def newest_trained(self) -> int:
        """The furthest round any member has finished training; -1 before any has."""
        return self.newest_trained_by_others(None)

    def newest_trained_by_others(self, client_id: int | None) -> int:
        """The furthest round a member other than ``client_id`` has finished training."""
        members = (m for c, m in self.members.items() if c != client_id)
        return max((m.last_round for m in members if m.rounds_trained > 0), default=-1)

    def view(self) -> View:
        live = self.live
        return View(
            epoch=self.epoch,
            members=tuple(live),
            first_rounds=tuple(self.members[c].first_round for c in live),
            stragglers=tuple(c for c in live if c in self.stragglers),
            speeds=tuple(self.speeds[c] for c in live) if set(live) <= set(self.speeds) else (),
            members_since=self.members_since,
        )

    def to_record(self) -> dict[str, Any]:
        """The table as plain data (for the coordinator's JSON checkpoint)."""
        members = [{**asdict(m), "state": m.state.value} for m in self.members.values()]
        return {
            "epoch": self.epoch,
            "members_since": self.members_since,
            "order": list(self.order),
            "members": members,
        }

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> MembershipTable:
        table = cls()
        table.epoch, table.order = int(record["epoch"]), [int(c) for c in record["order"]]
        table.members_since = int(record.get("members_since", table.epoch))
        for fields in record["members"]:
            member = Member(**{**fields, "state": MemberState(fields["state"])})
            table.members[member.client_id] = member
        return table

    def seen(self, client_id: int, round_: int | None = None) -> None:
        member = self.members[client_id]
        member.last_seen = time.monotonic()
        if round_ is not None:
            member.last_round = max(member.last_round, round_)
