"""A short chaos soak on the in-process ring: random fault plans hold the invariants."""

from __future__ import annotations

import pytest

from benchmarks.soak import lap_audit, random_plan, run_in_process, violations
from tests.conftest import needs_data

pytestmark = [needs_data, pytest.mark.slow]


@pytest.mark.parametrize("seed", [0, 1, 4])
def test_a_random_fault_plan_holds_every_invariant(tmp_path, seed):
    plan = random_plan(seed, "in-process")
    assert plan["faults"]  # something goes wrong in every plan
    summary, rows, events = run_in_process(plan, tmp_path)
    assert violations(plan, summary, rows, events) == []


def test_the_checker_sees_a_broken_invariant(tmp_path):
    plan = random_plan(2, "in-process")
    summary, rows, events = run_in_process(plan, tmp_path)
    summary["events"]["lost_payloads"] = 1
    rows.append({**rows[-1], "lap_avg_checksum": 12345.0, "round": 0})
    rows.append({**rows[-1], "lap_avg_checksum": 54321.0, "round": 0})
    broken = violations(plan, summary, rows, events[:0])
    assert "1 payloads lost" in broken
    assert any("different lap totals" in b for b in broken)


def test_a_member_without_a_lap_total_that_round_is_no_split(tmp_path):
    """Parquet fills a column a row lacks with None: that member applied no total."""
    plan = random_plan(2, "in-process")
    summary, rows, events = run_in_process(plan, tmp_path)
    rows.append({**rows[-1], "lap_avg_checksum": 1.0, "round": 0})
    rows.append({**rows[-1], "lap_avg_checksum": None, "round": 0})
    assert not any("different lap totals" in b for b in violations(plan, summary, rows, events))


def test_a_lap_total_that_is_not_the_sum_of_its_contributions_is_caught(tmp_path):
    plan = random_plan(4, "in-process")  # fedavg: every round is a lap
    assert plan["algorithm"] == "fedavg"
    summary, rows, events = run_in_process(plan, tmp_path)
    audited, unauditable, broken = lap_audit(rows)
    assert audited == plan["rounds"] and unauditable == 0 and broken == []
    row = next(r for r in rows if r["round"] == 1 and r.get("lap_average_contribution"))
    row["lap_average_contribution"] *= 1.01  # one member's share went in changed
    assert any("round 1 lap average" in b for b in violations(plan, summary, rows, events))
