"""The fault plan: per-client slowdown, and the entries the driver applies."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from ring_actors.config import FaultSection
from ring_actors.faults.client_side import slow_delay
from ring_actors.faults.driver_side import AppliedFaults, carry_out, driver_faults_due
from ring_actors.faults.plan import plan_lines


def entry(at_round: int, slow: tuple[int, ...], delay_s: float) -> FaultSection:
    return FaultSection(at_round=at_round, slow=slow, delay_s=delay_s)


def test_no_plan_means_no_delay():
    assert slow_delay([], 0, 0) == 0.0
    assert slow_delay((), 3, 100) == 0.0


def test_entry_applies_from_its_round_on():
    plan = [entry(3, (1,), 2.5)]
    assert [slow_delay(plan, 1, r) for r in range(6)] == [0.0, 0.0, 0.0, 2.5, 2.5, 2.5]
    assert slow_delay(plan, 1, 1000) == 2.5


@pytest.mark.parametrize("reverse", [False, True])
def test_latest_started_entry_wins_whatever_the_plan_order(reverse):
    plan = [entry(2, (1,), 1.0), entry(5, (1, 2), 3.0)]
    if reverse:
        plan.reverse()
    assert [slow_delay(plan, 1, r) for r in (0, 2, 4, 5, 9)] == [0.0, 1.0, 1.0, 3.0, 3.0]
    assert [slow_delay(plan, 2, r) for r in (2, 4, 5)] == [0.0, 0.0, 3.0]


def test_later_entry_for_other_clients_does_not_cancel_an_earlier_one():
    plan = [entry(1, (0,), 0.5), entry(4, (2,), 2.0)]
    assert slow_delay(plan, 0, 6) == 0.5
    assert slow_delay(plan, 2, 6) == 2.0


def test_other_clients_are_unaffected():
    plan = [entry(0, (1, 3), 1.5)]
    assert slow_delay(plan, 1, 0) == 1.5
    assert slow_delay(plan, 3, 7) == 1.5
    for client in (0, 2, 4):
        assert slow_delay(plan, client, 7) == 0.0


def test_driver_applies_kills_once_when_the_ring_reaches_them():
    plan = (
        FaultSection(at_round=2, kill_coordinator=True),
        FaultSection(at_round=3, kill_node=(0,)),
        FaultSection(at_round=0, crash=(1,)),  # the client carries this one out itself
    )
    assert driver_faults_due(plan, 1, 2, set()) == []
    assert driver_faults_due(plan, 2, 2, set()) == [0]
    assert driver_faults_due(plan, 5, 5, {0}) == [1]


def test_driver_splices_joiners_in_before_the_ring_begins_their_round():
    plan = (FaultSection(at_round=4, join=2), FaultSection(at_round=1, join=1))
    # newest: the furthest round a member finished; -1 before any has.
    assert driver_faults_due(plan, 0, -1, set()) == [1]
    assert driver_faults_due(plan, 1, 1, {1}) == []
    assert driver_faults_due(plan, 1, 2, {1}) == [0]


@dataclass
class Driver:
    """A driver's actions on a run of ``clients`` started clients, as a list of what it did."""

    clients: int
    admitted: set[int]
    did: list[tuple] = field(default_factory=list)

    def standby(self, count: int) -> list[int]:
        return [c for c in range(self.clients) if c not in self.admitted][:count]

    def admit(self, clients: Sequence[int], first_round: int | None = None) -> None:
        self.admitted.update(clients)
        self.did.append(("admit", tuple(clients), first_round))

    def kill_coordinator(self) -> None:
        self.did.append(("kill_coordinator",))

    def kill_nodes_of(self, clients: Sequence[int]) -> None:
        self.did.append(("kill_node", tuple(clients)))


PLAN = (
    FaultSection(at_round=1, crash=(2,)),
    FaultSection(at_round=2, join=1),
    FaultSection(at_round=3, kill_coordinator=True),
)


def test_a_resumed_driver_applies_only_the_entries_not_applied_before(tmp_path):
    path = tmp_path / "driver_faults.json"
    first = Driver(clients=4, admitted={0, 1, 2})
    carry_out(first, PLAN, ring_round=3, newest=3, applied=AppliedFaults(path), rounds=10)
    assert first.did == [("admit", (3,), 2), ("kill_coordinator",)]
    # The resumed run's members: the joiner came back as one, not as standby.
    resumed = Driver(clients=4, admitted={0, 1, 2, 3})
    carry_out(resumed, PLAN, ring_round=4, newest=4, applied=AppliedFaults.read(path), rounds=10)
    assert resumed.did == []


def test_a_join_noted_but_not_admitted_when_the_driver_died_is_finished_with_its_clients(
    tmp_path,
):
    path = tmp_path / "driver_faults.json"
    AppliedFaults(path).note(1, [3])  # the driver died before the coordinator admitted 3
    resumed = Driver(clients=5, admitted={0, 1, 2})
    carry_out(resumed, PLAN, ring_round=2, newest=2, applied=AppliedFaults.read(path), rounds=10)
    assert resumed.did == [("admit", (3,), 2)]


def test_entries_past_the_runs_last_round_are_never_due_and_are_announced():
    """A 3-round run of the quickstart's plan: its join at round 4 can have no round."""
    plan = (FaultSection(at_round=2, crash=(1,)), FaultSection(at_round=4, join=1))
    assert driver_faults_due(plan, 2, 2, set(), rounds=3) == []
    assert driver_faults_due(plan, 2, 2, set(), rounds=5) == [1]
    lines = plan_lines(plan, rounds=3)
    assert "round 2: crash client 1" in lines[0]
    assert "skipped" in lines[1] and "round 4" in lines[1] and "last round is 2" in lines[1]
