"""The GPU benchmark's code, run on whatever device there is at tiny sizes: both sides train,
report their figures, and the largest N that ran is the N they were given."""

from __future__ import annotations

import json

import pytest
import torch

from benchmarks.gpu import DEFAULT_DATA, largest_that_ran, main, table
from tests.conftest import needs_data

pytestmark = [needs_data, pytest.mark.slow]


def test_both_sides_run_and_report_at_tiny_sizes(tmp_path):
    out = tmp_path / "gpu.jsonl"
    args = ["--models", "cnn", "--clients", "2", "--rounds", "2", "--samples", "32"]
    args += ["--set", "clients.offload_parameters_mb=null"]
    rows = main([*args, "--data", DEFAULT_DATA, "--timeout-s", "900", "--json", str(out)])
    assert [(r["side"], r["clients"], r["ok"]) for r in rows] == [
        ("ring", 2, True),
        ("plain", 2, True),
    ], [r.get("error") for r in rows]
    for row in rows:
        assert row["rounds_completed"] == 2 and row["set"] == ["clients.offload_parameters_mb=null"]
        assert row["s_per_round"] > 0 and row["samples_per_s"] > 0
        assert ("gpu_total_mb" in row) == torch.cuda.is_available()
    ring = rows[0]
    assert 0 < ring["client_train_s"] <= ring["client_round_s"]
    assert ring["client_slot_wait_s"] >= 0 and ring["client_gather_wait_s"] >= 0
    assert ring["ray_init_s"] > 0 and ring["launch_and_end_s"] > 0
    assert [json.loads(line) for line in out.read_text().splitlines()] == rows
    assert largest_that_ran(rows) == {"cnn/ring": 2, "cnn/plain": 2}
    assert table(rows).count("\n") == 3  # header, rule, two runs


def test_a_bad_override_fails_the_run_with_the_key_named(tmp_path):
    args = ["--models", "cnn", "--clients", "2", "--rounds", "1", "--samples", "32"]
    args += ["--sides", "ring", "--set", "clients.offload_parameters_mb=-1"]
    rows = main([*args, "--data", DEFAULT_DATA, "--timeout-s", "300"])
    assert [r["ok"] for r in rows] == [False]
    assert "clients.offload_parameters_mb" in rows[0]["error"]
