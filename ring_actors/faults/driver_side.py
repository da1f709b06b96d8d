"""The fault plan on the driver: joins and kills of actors only the driver holds, each
applied once over the run's life, a resumed run's included."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from ring_actors.delivery.event_kinds import EventKind
from ring_actors.faults.plan import FaultSection, within_run
from ring_actors.storage.durable import write_atomic


class DriverActions(Protocol):
    """What the driver can do to the run it holds."""

    admitted: set[int]  # the clients in the run: started members and spliced joiners

    def standby(self, count: int) -> list[int]: ...

    def admit(self, clients: Sequence[int], first_round: int | None = None) -> None: ...

    def kill_coordinator(self) -> None: ...

    def kill_nodes_of(self, clients: Sequence[int]) -> None: ...


class AppliedFaults:
    """The driver-side entries applied so far, by index in the plan, each with the clients a
    join spliced in; in the run folder (``path``) for a resumed run to read back.

    An entry is noted before it is carried out, so none is applied twice: a kill cut short
    by the driver's death is not repeated (that death took every actor of the run down),
    and a join noted but perhaps not admitted is finished by :func:`carry_out` with the
    clients it named.
    """

    def __init__(self, path: Path, entries: dict[int, tuple[int, ...]] | None = None) -> None:
        self.path = path
        self.entries = dict(entries or {})

    @classmethod
    def read(cls, path: Path) -> AppliedFaults:
        """The record a run left in ``path``; none applied if it never wrote one."""
        if not path.exists():
            return cls(path)
        saved = json.loads(path.read_text())
        return cls(path, {int(index): tuple(clients) for index, clients in saved.items()})

    @classmethod
    def recovered(
        cls, path: Path, plan: Sequence[FaultSection], events: Iterable[Mapping[str, Any]]
    ) -> AppliedFaults:
        """The entries a run folder with no record in ``path`` (written before there was
        one, or lost) shows applied by its ``events``; written to ``path`` for later."""
        applied = cls(path, applied_by_events(plan, events))
        applied.save()
        return applied

    def note(self, index: int, clients: Sequence[int] = ()) -> None:
        self.entries[index] = tuple(clients)
        self.save()

    def save(self) -> None:
        listed = {str(i): list(joined) for i, joined in sorted(self.entries.items())}
        write_atomic(self.path, json.dumps(listed))


def applied_by_events(
    plan: Sequence[FaultSection], events: Iterable[Mapping[str, Any]]
) -> dict[int, tuple[int, ...]]:
    """The driver-side entries whose effects ``events`` record, each with the clients a
    join spliced in. Joins took the clients that joined, in turn, in the order they fell
    due (by round); a node's kill shows as a crash (or hang) of a client it named, from the
    round before the entry's on; each coordinator kill as a restore (a resumed run restores
    it too, and says so). A join whose driver died between two admissions keeps the
    clients that joined."""
    kinds: list[str] = []
    joined: list[int] = []
    gone: list[tuple[int, int]] = []  # (client, its last finished round) at a death
    for event in events:
        kind, client = str(event["kind"]), int(event["client"])
        kinds.append(kind)
        if kind == EventKind.JOIN:
            joined.append(client)
        elif kind in (EventKind.CRASH, EventKind.HANG):
            gone.append((client, int(event["round"])))
    restores = kinds.count(EventKind.COORDINATOR_RESTORED) - kinds.count(EventKind.RUN_RESUMED)
    applied: dict[int, tuple[int, ...]] = {}
    for index in sorted(range(len(plan)), key=lambda i: (plan[i].at_round, i)):
        entry = plan[index]
        if entry.join and joined:
            applied[index], joined = tuple(joined[: entry.join]), joined[entry.join :]
        elif entry.kill_coordinator and restores > 0:
            applied[index], restores = (), restores - 1
        elif any(c in entry.kill_node and r >= entry.at_round - 1 for c, r in gone):
            applied[index] = ()
    return applied


def driver_faults_due(
    plan: Sequence[FaultSection],
    ring_round: int,
    newest: int,
    applied: set[int],
    rounds: int | None = None,
) -> list[int]:
    """Indices of the entries the driver applies that are due and not applied yet; none
    past the end of a run of ``rounds`` rounds (announced as skipped at launch).

    Kills of nodes or the coordinator are due once every member has reached their round
    (``ring_round``). A join at round R is due once some member has finished round R - 2
    (``newest``): spliced in then, the joiner is in the ring before anyone begins round R.
    """

    def due(entry: FaultSection) -> bool:
        if not within_run(entry, rounds):
            return False
        if entry.join:
            return newest + 2 >= entry.at_round
        return bool(entry.kill_node or entry.kill_coordinator) and ring_round >= entry.at_round

    return [i for i, entry in enumerate(plan) if i not in applied and due(entry)]


def carry_out(
    actions: DriverActions,
    plan: Sequence[FaultSection],
    ring_round: int,
    newest: int,
    applied: AppliedFaults,
    rounds: int,
) -> None:
    """Apply the plan's driver-side entries now due, and finish a join that a driver killed
    between noting and admitting it left undone."""
    for index, clients in applied.entries.items():
        missing = [c for c in clients if c not in actions.admitted]
        if missing:
            actions.admit(missing, plan[index].at_round)
    for index in driver_faults_due(plan, ring_round, newest, set(applied.entries), rounds):
        entry = plan[index]
        joiners = actions.standby(entry.join) if entry.join else []
        applied.note(index, joiners)
        if joiners:
            actions.admit(joiners, entry.at_round)
        if entry.kill_coordinator:
            actions.kill_coordinator()
        if entry.kill_node:
            actions.kill_nodes_of(entry.kill_node)
