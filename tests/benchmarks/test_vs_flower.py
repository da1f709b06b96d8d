"""The Flower comparison's round breakdown: phases of the rounds after the first, and the share
of the cores' time that went to training."""

from __future__ import annotations

import json

import pytest

from benchmarks.vs_flower import breakdown, breakdown_table, main, parse_args
from tests.conftest import DATA_ROOT, needs_data


def test_the_breakdown_skips_the_first_round_and_counts_training_against_the_cores():
    phases = [
        {"round": 0, "train_s": 100.0, "slot_wait_s": 50.0},  # start-up: left out
        {"round": 1, "train_s": 4.0, "slot_wait_s": 1.0},
        {"round": 1, "train_s": 6.0, "slot_wait_s": 3.0},
        {"round": 2, "train_s": 5.0, "slot_wait_s": 2.0},
        {"round": 2, "train_s": 5.0, "eval_s": 0.5},  # a phase only some records carry
    ]
    found = breakdown(phases, s_per_round=10.0, cores=2)
    assert found["train_s_median"] == 5.0 and found["slot_wait_s_median"] == 2.0
    assert found["eval_s_median"] == 0.5
    # 20 s of training over 2 rounds x 10 s x 2 cores
    assert found["compute_share"] == pytest.approx(0.5)


def test_the_table_has_a_column_per_phase_any_side_reports():
    rows = [
        {"side": "ring", "breakdown": {"train_s_median": 5.0, "compute_share": 0.8}},
        {"side": "flower", "breakdown": {"load_s_median": 0.2, "compute_share": 0.9}},
    ]
    lines = breakdown_table(rows).splitlines()
    assert lines[0] == "| side | load_s | train_s | compute share |"
    assert lines[2] == "| ring |  | 5.00 | 0.80 |" and lines[3] == "| flower | 0.20 |  | 0.90 |"


def test_the_memory_sampler_reports_what_sampling_cost():
    """Sampling reads every process's page tables: its own CPU time is reported, since it
    shares the cores with the side it measures (more processes, more cost)."""
    import os
    import time

    from benchmarks.common import TreeSampler

    sampler = TreeSampler(os.getpid(), True, every_s=0.05)
    started = time.monotonic()
    sampler.start()
    deadline = started + 30  # a loaded machine schedules the sampler late: wait for samples
    while sampler.samples < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    sampler.stop.set()
    sampler.join()
    assert sampler.samples >= 3
    assert 0 < sampler.own_cpu_s < time.monotonic() - started  # its CPU, within its wall time
    assert sampler.peak_pss_kb > 0


@needs_data
@pytest.mark.slow
def test_only_the_one_thread_plain_loop_gives_the_floor(tmp_path):
    """One thread a client is the work a ring or Flower client does: that loop over the cores
    is the floor. A loop with every core for torch already spreads it over them, so dividing
    its round by the cores would count the cores twice."""
    out = tmp_path / "vs.json"
    args = ["--sides", "plain", "--plain-threads", "1", "2", "--clients", "2", "--rounds", "2"]
    args += ["--max-train-per-client", "64", "--cores", "2", "--data-root", DATA_ROOT]
    assert main([*args, "--json", str(out)]) == 0
    one, two = json.loads(out.read_text())["results"]
    assert (one["side"], one["torch_threads"]) == ("plain (1 torch threads)", 1)
    assert (two["side"], two["torch_threads"]) == ("plain (2 torch threads)", 2)
    assert one["floor_s_per_round"] == pytest.approx(one["s_per_round"] / 2)
    assert "floor_s_per_round" not in two


@needs_data
@pytest.mark.slow
def test_the_ring_sides_processes_are_named_by_what_they_run(tmp_path):
    """The raylet, whose command line names Ray's setup script among its options, is the
    raylet: a setup process would mean actors that import Ray twice."""
    out = tmp_path / "vs.json"
    args = ["--sides", "ring", "--clients", "2", "--rounds", "2", "--max-train-per-client", "64"]
    assert main([*args, "--cores", "2", "--data-root", DATA_ROOT, "--json", str(out)]) == 0
    (ring,) = json.loads(out.read_text())["results"]
    assert ring["side"] == "ring" and ring["s_per_round"] > 0
    cpu_s = ring["cpu_s_by_process"]
    assert cpu_s["ray::ClientActor"] > 0 and cpu_s["raylet"] > 0
    assert "setup_worker.py" not in cpu_s, cpu_s


def test_a_plain_loop_of_no_threads_is_refused_with_the_option_named(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--plain-threads", "1", "0"])
    assert "--plain-threads: each an int >= 1, got [1, 0]" in capsys.readouterr().err
