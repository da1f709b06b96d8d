"""The coordinator's membership table: who is in the ring, in which order, at which epoch."""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field

from topologies import Topology, in_neighbours


class MemberState(enum.Enum):
    STARTING = "starting"
    RUNNING = "running"
    DONE = "done"
    DEAD = "dead"


@dataclass
class Member:
    client_id: int
    node_id: str = ""
    state: MemberState = MemberState.STARTING
    last_round: int = -1
    last_seen: float = field(default_factory=time.monotonic)


@dataclass(frozen=True)
class View:
    """What one client needs to know of the membership: its neighbours at an epoch."""

    epoch: int
    successors: tuple[int, ...]
    predecessors: tuple[int, ...]
    members: tuple[int, ...]


class MembershipTable:
    """Members in ring order; every change to the live set bumps the epoch.

    Pure bookkeeping with no Ray calls, so the state machine is testable on its own.
    """

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self.members: dict[int, Member] = {}
        self.order: list[int] = []
        self.epoch = 0

    def add(self, client_id: int, node_id: str = "", after: int | None = None) -> None:
        """Insert a member after ``after`` in ring order (at the end when None)."""
        if client_id in self.members:
            return  # idempotent: a retried join changes nothing
        self.members[client_id] = Member(client_id, node_id)
        position = len(self.order) if after is None else self.order.index(after) + 1
        self.order.insert(position, client_id)
        self.epoch += 1

    def mark(self, client_id: int, state: MemberState) -> bool:
        """Move a member to ``state``; True when the live set changed (epoch bumped)."""
        member = self.members[client_id]
        if member.state == state or member.state == MemberState.DEAD:
            return False
        was_live = self.is_live(client_id)
        member.state = state
        changed = was_live != self.is_live(client_id)
        if changed:
            self.epoch += 1
        return changed

    def revive(self, client_id: int, after: int) -> None:
        """A member declared dead answered again: splice it back in after ``after``."""
        member = self.members[client_id]
        if member.state != MemberState.DEAD:
            return
        member.state = MemberState.RUNNING
        self.order.remove(client_id)
        self.order.insert(self.order.index(after) + 1, client_id)
        self.epoch += 1

    def is_live(self, client_id: int) -> bool:
        """Live members take part in the ring (a finished member still receives)."""
        return self.members[client_id].state != MemberState.DEAD

    @property
    def live(self) -> list[int]:
        return [c for c in self.order if self.is_live(c)]

    def view(self, client_id: int, round_: int = 0) -> View:
        live = self.live
        return View(
            epoch=self.epoch,
            successors=tuple(self.topology.out_neighbours(live, client_id, round_)),
            predecessors=tuple(in_neighbours(self.topology, live, client_id, round_)),
            members=tuple(live),
        )

    def seen(self, client_id: int, round_: int | None = None) -> None:
        member = self.members[client_id]
        member.last_seen = time.monotonic()
        if round_ is not None:
            member.last_round = max(member.last_round, round_)
