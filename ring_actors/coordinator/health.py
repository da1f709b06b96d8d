"""Who may be dead or stuck: heartbeat probes, suspects, members bypassed for silence, when
each member last finished a round, and bypasses the ring has not yet healed from.

Each check returns what it found; the coordinator decides what to do with it (bypass, stop),
so the membership changes stay in one place.
"""

from __future__ import annotations

import random
import time

from ring_actors.coordinator.membership import MembershipTable
from ring_actors.delivery.event_kinds import EventKind
from ring_actors.delivery.transport import ClientHandle, PeerGone, PeerUnavailable, Pending

Death = tuple[int, EventKind, str]  # a member found dead or hung: (id, cause, detail)


class Health:
    """The coordinator's view of its members' liveness, kept between reconcile passes."""

    def __init__(self) -> None:
        self.probes: dict[int, tuple[Pending[int], float]] = {}  # answer, when it was sent
        self.next_probe: dict[int, float] = {}
        self.suspects: set[int] = set()  # reported unreachable: probed at once
        self.hung: set[int] = set()  # bypassed for silence, not death: may come back
        self.last_report: dict[int, float] = {}  # when each member last finished a round
        # Bypasses whose ring has not yet healed: (time of the bypass, the round every live
        # member must finish, having started it after the bypass).
        self.healing: list[tuple[float, int]] = []

    def heard(self, client_id: int) -> None:
        """A member finished a round (or starts its first): its stall clock starts again."""
        self.last_report[client_id] = time.monotonic()

    def forget(self, client_id: int) -> None:
        """A member is back in a new process: nothing known of the old one applies."""
        self.probes.pop(client_id, None)  # a probe of the old process must not kill the new
        self.suspects.discard(client_id)
        self.hung.discard(client_id)

    def settle_probes(
        self, table: MembershipTable, handles: dict[int, ClientHandle], probe_s: float
    ) -> list[Death]:
        """A probe that raised means crashed; one unanswered past ``probe_s``, hung."""
        now = time.monotonic()
        deaths: list[Death] = []
        for client_id, (answer, sent_at) in list(self.probes.items()):
            if answer.done():
                del self.probes[client_id]
                try:
                    table.seen(client_id, answer.result(0))
                    self.suspects.discard(client_id)
                except PeerGone as err:
                    deaths.append((client_id, EventKind.CRASH, str(err)))
                except PeerUnavailable:  # being restarted: ask again, same deadline
                    if now - sent_at > probe_s:
                        deaths.append(
                            (client_id, EventKind.HANG, "unavailable past the probe timeout")
                        )
                        self.hung.add(client_id)
                    else:
                        self.probes[client_id] = (handles[client_id].ping(), sent_at)
            elif now - sent_at > probe_s:
                del self.probes[client_id]
                deaths.append((client_id, EventKind.HANG, "no heartbeat answer"))
                self.hung.add(client_id)
        return deaths

    def start_probes(
        self, live: list[int], handles: dict[int, ClientHandle], heartbeat_s: float
    ) -> None:
        """At most one probe per member, on a jittered period; suspects at once."""
        now = time.monotonic()
        for client_id in live:
            due = self.next_probe.get(client_id, 0.0) <= now or client_id in self.suspects
            if client_id not in self.probes and due:
                self.probes[client_id] = (handles[client_id].ping(), now)
                self.next_probe[client_id] = now + heartbeat_s * random.uniform(0.9, 1.1)

    def stalled(self, running: list[int], limit_s: float) -> list[int]:
        """Running members that finished no round for ``limit_s``."""
        now = time.monotonic()
        return [c for c in running if now - self.last_report.get(c, now) > limit_s]

    def bypassed(self, at_s: float, heal_round: int) -> None:
        """A bypass at ``at_s`` heals once every live member finished ``heal_round``."""
        self.healing.append((at_s, heal_round))

    def healed(self, slowest_round: int) -> list[tuple[float, int]]:
        """Bypasses that every live member has now passed, taken off the list."""
        done = [h for h in self.healing if slowest_round >= h[1]]
        for heal in done:
            self.healing.remove(heal)
        return done

    def diagnosis(self, table: MembershipTable, started_at: float) -> str:
        """Who is where, for a run that stopped advancing."""
        members = table.members
        return "; ".join(
            f"client {c} last finished round {members[c].last_round} "
            f"({time.monotonic() - self.last_report.get(c, started_at):.0f} s ago)"
            for c in table.live
        )
