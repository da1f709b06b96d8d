"""The membership a client acts on, as the coordinator hands it out: it travels with every
delivery decision, so it lives below both sides."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class View:
    """The membership every client acts on: live members in ring order at an epoch.

    Neighbour sets are a pure function of a view and a round (see ``topologies``), so the
    coordinator hands out one view and every client derives the same sets without asking.
    """

    epoch: int
    members: tuple[int, ...]
    first_rounds: tuple[int, ...]  # per member: the first round it trains (joiners start late)
    # Members nobody waits for (``schedule.straggler_factor``); they still send and receive.
    stragglers: tuple[int, ...] = ()
    # Per member: seconds per round, measured (or the configured speed factor before any
    # round is measured); empty when neither is known. Topologies may sample by it.
    speeds: tuple[float, ...] = ()
    # The epoch its members and first rounds were last changed at (a pace change moves the
    # epoch alone); None: this epoch. What is built per membership keys on it.
    members_since: int | None = None

    @property
    def members_epoch(self) -> int:
        """The epoch of this view's membership: equal in views that differ in pace alone."""
        return self.epoch if self.members_since is None else self.members_since

    def speed_of(self) -> dict[int, float]:
        """Each member's seconds per round, by id (empty when unknown)."""
        return dict(zip(self.members, self.speeds, strict=False))

    def successor(self, client_id: int) -> int | None:
        """The next live member in ring order (the ring laps' path); None when alone."""
        if client_id not in self.members or len(self.members) < 2:
            return None
        position = self.members.index(client_id)
        return self.members[(position + 1) % len(self.members)]

    def active(self, round_: int) -> tuple[int, ...]:
        """Members that train in ``round_`` (a joiner from its first round on)."""
        return tuple(m for m, f in zip(self.members, self.first_rounds, strict=True) if f <= round_)
