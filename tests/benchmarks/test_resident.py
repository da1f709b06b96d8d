"""The resident-process benchmark at its smallest: every arrangement trains every client each
round, in as many processes as it says."""

from __future__ import annotations

import json

import pytest

from benchmarks.resident import main
from tests.conftest import DATA_ROOT, needs_data

pytestmark = [pytest.mark.slow, needs_data]


def test_every_arrangement_trains_every_client_each_round(tmp_path):
    out = tmp_path / "resident.json"
    arrangements = ["per_core", "per_client", "ray_actor_thread"]
    argv = ["--clients", "4", "--rounds", "2", "--repeats", "1", "--max-train-per-client", "64"]
    argv += ["--cores", "2", "--data-root", DATA_ROOT, "--json", str(out)]
    assert main([*argv, "--arrangements", *arrangements]) == 0
    runs = json.loads(out.read_text())["runs"]
    assert [r["arrangement"] for r in runs] == arrangements
    assert [r["processes"] for r in runs] == [2, 4, 4]
    for run in runs:
        done = sorted((r["round"], r["client"]) for r in run["records"])
        assert done == [(r, c) for r in range(2) for c in range(4)]
        assert all(r["train_s"] > 0 for r in run["records"])
