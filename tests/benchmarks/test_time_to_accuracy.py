"""The time-to-accuracy benchmark runs at a tiny size on both backends and records, per arm,
the regime, rounds per client and the shares of round time spent waiting."""

from __future__ import annotations

import json

import pytest

from benchmarks.time_to_accuracy import main


def _run(tmp_path, backend: str, arms: list[str]) -> dict:
    out = tmp_path / "tta.json"
    main(
        [
            "--backend", backend, "--regime", "compute-bound", "--dataset", "fashion-mnist-sample",
            "--clients", "3", "--max-train", "24", "--budget-s", "4", "--mark-s", "1",
            "--global-max", "40", "--seeds", "0", "--out", str(out),
            # No client offline for the rest of a 4 s run: each must be evaluated once.
            "schedule.hop_timeout_s=5", "heterogeneity.availability.mean_online_s=1000",
            "--arms", *arms,
        ]
    )  # fmt: skip
    return json.loads(out.read_text())


def _check(record: dict, arms: list[str]) -> None:
    assert [run["arm"] for run in record["runs"]] == arms
    for run in record["runs"]:
        assert run["regime"] == "compute-bound"
        assert len(run["rounds"]) == 3 and min(run["rounds"]) >= 1
        for key in ("slot_wait", "gather_wait"):
            assert 0.0 <= run[f"{key}_share"] <= run[f"{key}_share_max"] <= 1.0
        assert run["global_acc_curve"], "every client was evaluated at least once"


@pytest.mark.slow
def test_the_in_process_backend_records_each_arm(tmp_path):
    record = _run(tmp_path, "in_process", ["sync", "async-s1000-least-recent"])
    _check(record, ["sync", "async-s1000-least-recent"])
    table = (tmp_path / "tta.md").read_text()
    assert "slot wait" in table and "async-s1000-least-recent" in table


@pytest.mark.slow
def test_the_ray_backend_records_what_the_runtime_ran(tmp_path, ray_local):
    record = _run(tmp_path, "ray", ["async-s1000"])
    _check(record, ["async-s1000"])
