"""A short chaos soak on the in-process ring: random fault plans hold the invariants."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest

from benchmarks.soak import lap_audit, random_plan, run_in_process, violations
from tests.conftest import needs_data

pytestmark = [needs_data, pytest.mark.slow]

Soaked = tuple[dict, dict, list, list]  # the plan, and its run's summary, rows and events


@pytest.fixture(scope="module")
def soaked(tmp_path_factory: pytest.TempPathFactory) -> Callable[[int], Soaked]:
    """The run of the plan of a seed, run once for the module (20-30 s each); every test
    gets its own copy to break."""
    runs: dict[int, Soaked] = {}

    def run(seed: int) -> Soaked:
        if seed not in runs:
            plan = random_plan(seed, "in-process")
            runs[seed] = (plan, *run_in_process(plan, tmp_path_factory.mktemp(f"plan-{seed}")))
        return copy.deepcopy(runs[seed])

    return run


@pytest.mark.parametrize("seed", [0, 1, 4])
def test_a_random_fault_plan_holds_every_invariant(soaked, seed):
    plan, summary, rows, events = soaked(seed)
    assert plan["faults"]  # something goes wrong in every plan
    assert violations(plan, summary, rows, events) == []


def test_the_checker_sees_a_broken_invariant(soaked):
    plan, summary, rows, events = soaked(2)
    summary["events"]["lost_payloads"] = 1
    rows.append({**rows[-1], "lap_avg_checksum": 12345.0, "round": 0})
    rows.append({**rows[-1], "lap_avg_checksum": 54321.0, "round": 0})
    broken = violations(plan, summary, rows, events[:0])
    assert "1 payloads lost" in broken
    assert any("different lap totals" in b for b in broken)


def test_a_member_without_a_lap_total_that_round_is_no_split(soaked):
    """Parquet fills a column a row lacks with None: that member applied no total."""
    plan, summary, rows, events = soaked(2)
    rows.append({**rows[-1], "lap_avg_checksum": 1.0, "round": 0})
    rows.append({**rows[-1], "lap_avg_checksum": None, "round": 0})
    assert not any("different lap totals" in b for b in violations(plan, summary, rows, events))


def test_a_lap_total_that_is_not_the_sum_of_its_contributions_is_caught(soaked):
    plan, summary, rows, events = soaked(4)  # fedavg: every round is a lap
    assert plan["algorithm"] == "fedavg"
    audited, unauditable, broken = lap_audit(rows)
    assert audited == plan["rounds"] and unauditable == 0 and broken == []
    row = next(r for r in rows if r["round"] == 1 and r.get("lap_average_contribution"))
    row["lap_average_contribution"] *= 1.01  # one member's share went in changed
    assert any("round 1 lap average" in b for b in violations(plan, summary, rows, events))
