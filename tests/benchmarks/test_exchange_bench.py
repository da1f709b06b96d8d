"""The exchange benchmark at its smallest: every part yields rows of the promised shape, a
hop's phases add up to no more than the hop, and a process's CPU is counted after it exits.
Figures are not checked: they mean something only on a quiet machine."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from benchmarks.common import tree_cpu_s
from benchmarks.exchange import PHASES, main
from benchmarks.exchange.overhead import ActorCpuWatch

pytestmark = pytest.mark.slow


def test_a_hop_by_phase_and_laps_in_process_and_on_ray(tmp_path, no_ray):
    out = tmp_path / "exchange.json"
    rows = main(
        ["--parts", "hop", "lap", "--sizes-mb", "1", "--members", "3",
         "--backbones", "cnn", "--repeats", "2", "--json", str(out)]
    )  # fmt: skip
    hops = [r for r in rows if r["part"] == "hop"]
    assert [(r["mb"], r["repeats"]) for r in hops] == [(1.0, 2)]
    for row in hops:
        assert set(row["phases_ms"]) == set(PHASES)
        assert all(v >= 0 for v in row["phases_ms"].values())
        assert sum(row["phases_ms"].values()) <= row["whole_ms"] * (1 + 1e-9)  # float sums
        assert row["bare_ray_ms"] > 0 and row["memcpy_ms"] > 0
    laps = [r for r in rows if r["part"] == "lap"]
    kinds = {
        "in process": ("chunks", "engine", "token"),
        "ray": ("agreement", "bare", "chunks", "engine", "token"),
    }
    assert sorted((r["where"], r["kind"], r["members"]) for r in laps) == [
        (where, kind, 3) for where in ("in process", "ray") for kind in kinds[where]
    ]
    for row in laps:
        assert row["finished"] and row["laps"] == 2 and row["backbone"] == "cnn"
        assert row["lap_ms"] > 0 and row["a_ms"] > 0 and row["B_gb_per_s"] > 0
        assert row["bound_ms"] > 2 * (row["members"] - 1) * row["a_ms"]
    assert json.loads(out.read_text()) == rows


def test_a_merge_beside_a_memcpy_of_the_states_it_merges(tmp_path):
    rows = main(
        ["--parts", "merge", "--backbones", "cnn", "--received", "1", "2", "--repeats", "2",
         "--json", str(tmp_path / "exchange.json")]
    )  # fmt: skip
    assert [(r["part"], r["backbone"], r["received"]) for r in rows] == [
        ("merge", "cnn", 1),
        ("merge", "cnn", 2),
    ]
    for row in rows:
        assert row["merge_ms"] > 0 and row["memcpy_ms"] > 0 and row["mb"] > 1


def test_a_checkpoint_in_a_steady_round_by_method(tmp_path):
    rows = main(
        ["--parts", "checkpoint", "--methods", "dfedavg", "fedavg", "--checkpoint-rounds", "6",
         "--json", str(tmp_path / "exchange.json")]
    )  # fmt: skip
    assert [(r["part"], r["method"], r["rounds"]) for r in rows] == [
        ("checkpoint", "dfedavg", 2),
        ("checkpoint", "fedavg", 2),
    ]
    for row in rows:  # a cnn of 6 MiB and its optimiser, at the least
        assert row["cpu_ms"] > 0 and row["wall_ms"] > 0 and row["mb_written"] > 6


def test_the_framework_cpu_per_client_round_of_a_run(tmp_path):
    out = tmp_path / "exchange.json"
    rows = main(
        ["--parts", "overhead", "--clients", "2", "--methods", "dfedavg", "--rounds", "1", "2",
         "--idle-s", "3", "--json", str(out)]
    )  # fmt: skip
    assert [(r["part"], r["method"], r["clients"]) for r in rows] == [("overhead", "dfedavg", 2)]
    row = rows[0]
    assert [(run["rounds"], run["rounds_completed"]) for run in row["runs"]] == [(1, 1), (2, 2)]
    for run in row["runs"]:  # every client-round's training is left out, not only scored ones
        assert run["trained_client_rounds"] == 2 * run["rounds"]
        assert run["cpu_s"] > run["train_cpu_s"] > 0
        assert run["core_s_per_client_round"] > 0
        assert 0 < run["round_s"] < run["wall_s"]  # the rounds, without the launch
    assert row["core_s_per_client_round"] == row["runs"][-1]["core_s_per_client_round"]
    assert row["clients_own_core_s_beyond_training"] > 0  # round 1's, as the clients measured
    # round 1 merges what round 0 pushed: the merge counts beyond the local training
    beyond, beyond_local = (
        row[f"clients_own_core_s_beyond_{part}"] for part in ("training", "local_training")
    )
    assert beyond_local > beyond
    assert row["added_core_s_per_client_round"] == pytest.approx(sum(row["added_by_kind"].values()))
    # Ray's own loops: some CPU (a few 10 ms ticks in 3 s), far from a core
    assert 0 < row["idle_actor_core_s_per_s"] < 1
    assert row["idle_floor_per_client_round"] == pytest.approx(
        row["idle_actor_core_s_per_s"] * row["runs"][-1]["round_s"]
    )
    for run in row["runs"]:  # the actors' processes are told apart from Ray's own
        assert run["cpu_s_by_kind"]["clients"] > run["train_cpu_s"]
        assert run["cpu_s_by_kind"]["coordinator"] > 0 and run["cpu_s_by_kind"]["ray"] > 0
    assert json.loads(out.read_text()) == rows


def test_the_cpu_of_a_child_that_exited_is_still_counted():
    before = tree_cpu_s()
    spin = "import time\nend = time.process_time() + 0.5\nwhile time.process_time() < end: pass"
    subprocess.run([sys.executable, "-c", spin], check=True)  # waited for: its time is ours
    assert tree_cpu_s() - before >= 0.5


def test_an_actor_that_exited_before_the_read_keeps_its_kind():
    watch = ActorCpuWatch()
    watch.seen = {2**22 + 1: ("clients", 2.0)}  # beyond pid_max: gone, its raylet reaped it
    assert watch.gone_since({"ray": 5.0, "driver": 1.0}) == {
        "ray": 3.0,
        "driver": 1.0,
        "clients": 2.0,
    }
