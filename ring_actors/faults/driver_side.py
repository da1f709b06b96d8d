"""The fault plan on the driver: joins and kills of actors only the driver holds."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ring_actors.faults.plan import FaultSection


class DriverActions(Protocol):
    """What the driver can do to the run it holds."""

    def join(self, count: int, first_round: int) -> object: ...

    def kill_coordinator(self) -> None: ...

    def kill_nodes_of(self, clients: Sequence[int]) -> None: ...


def driver_faults_due(
    plan: Sequence[FaultSection], ring_round: int, newest: int, applied: set[int]
) -> list[int]:
    """Indices of the entries the driver applies that are due and not applied yet.

    Kills of nodes or the coordinator are due once every member has reached their round
    (``ring_round``). A join at round R is due once some member has finished round R - 2
    (``newest``): spliced in then, the joiner is in the ring before anyone begins round R.
    """

    def due(entry: FaultSection) -> bool:
        if entry.join:
            return newest + 2 >= entry.at_round
        return bool(entry.kill_node or entry.kill_coordinator) and ring_round >= entry.at_round

    return [i for i, entry in enumerate(plan) if i not in applied and due(entry)]


def apply_driver_fault(actions: DriverActions, entry: FaultSection) -> None:
    """Carry out one entry the driver applies: a join or a kill."""
    if entry.join:
        actions.join(entry.join, first_round=entry.at_round)
    if entry.kill_coordinator:
        actions.kill_coordinator()
    if entry.kill_node:
        actions.kill_nodes_of(entry.kill_node)
