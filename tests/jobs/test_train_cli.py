"""See before it runs: --list, --print-config and --dry-run answer without starting Ray."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import torch
import yaml

from ring_actors.algorithms import ALGORITHMS
from ring_actors.client.method_factory import build_algorithm
from ring_actors.config import load_config
from ring_actors.data.sources import dataset_facts
from tests.conftest import DATA_ROOT, needs_data, small_config
from tests.helpers.train_cli import REPO, run

CELL = "jobs/configs/paper/drdfl-cifar10-dir0.1.yaml"
pytestmark = pytest.mark.slow  # each test runs the CLI in a fresh interpreter


def test_list_names_every_method_dataset_topology_and_paper_config():
    out, imported_ray = run("--list")
    for name in (*ALGORITHMS, "fashion-mnist", "dirichlet", "exponential"):
        assert name in out
    assert "latent_learngene=100" in out  # a method's option with its default
    for path in sorted((REPO / "jobs/configs/paper").glob("*.yaml")):
        assert re.search(rf"{re.escape(path.name)}\s+.*reproduces \d{{3}} ", out), path.name
    assert not imported_ray


def test_print_config_is_the_resolved_config_with_defaults():
    out, imported_ray = run("--print-config", "clients.count=4", "algorithm.name=dfedavg")
    printed = yaml.safe_load(out.rsplit("\n", 2)[0])
    assert printed["clients"]["count"] == 4 and printed["algorithm"]["name"] == "dfedavg"
    assert printed["schedule"]["stall_hops"] == 30.0  # a default no file sets, shown
    assert not imported_ray


def test_print_config_of_a_paper_cell_under_another_method():
    out, imported_ray = run("--config", CELL, "--print-config", "algorithm.name=ua_pdfl")
    printed = yaml.safe_load(out.rsplit("\n", 2)[0])
    expected = load_config(CELL, ["algorithm.name=ua_pdfl"]).to_dict()
    assert printed == expected and printed["algorithm"]["threshold"] == 0.1
    assert printed["data"]["partition"]["beta"] == 0.1 and not imported_ray


def test_a_bad_config_stops_before_ray_naming_the_key():
    for override, key in [
        ("experiment.name=../../escaped", "experiment.name"),
        ("algorithm.lr=.inf", "algorithm.lr"),
        ("experiment.seed=-1", "experiment.seed"),
    ]:
        out, imported_ray = run("--dry-run", override, expect=2)
        assert f"config error: {key}:" in out and not imported_ray


def test_files_a_config_names_are_checked_before_ray(tmp_path):
    edges = tmp_path / "edges.txt"
    edges.write_text("0 1\n1 x\n")
    missing = tmp_path / "none.txt"
    for overrides, key, message in [
        (["topology.kind=graph", f"topology.edges={missing}"], "topology.edges", "No such file"),
        (["topology.kind=graph", f"topology.edges={edges}"], "topology.edges", "line 2: expected"),
        (
            [f"data.root={tmp_path}", "data.download=false", "data.dataset=fashion-mnist"],
            "data.root",
            f"is not at {tmp_path}",
        ),
    ]:
        out, imported_ray = run("--dry-run", *overrides, expect=2)
        assert f"config error: {key}: " in out and message in out, out
        assert not imported_ray


@needs_data
def test_dry_run_checks_the_data_and_prints_the_plan():
    full = [f"data.root={DATA_ROOT}", "data.dataset=fashion-mnist", "faults=[]"]
    out, imported_ray = run("--dry-run", *full, "clients.count=4")
    assert "(found)" in out and "4 (4 at the start)" in out and "MB per hop" in out
    assert "about 3.6 GB (0.42 GB per client process, 1.9 GB for Ray" in out  # as launch checks
    assert not imported_ray


@needs_data
def test_dry_run_measures_a_plug_in_methods_bytes_per_hop():
    overrides = [f"data.root={DATA_ROOT}", "algorithm.name=examples.fedprox:FedProx"]
    out, imported_ray = run("--dry-run", *overrides)
    config = load_config(REPO / "jobs/configs/quickstart.yaml", overrides)
    facts = dataset_facts(config.data.dataset, config.data.root)
    method = build_algorithm(
        config, 0, facts["num_classes"], facts["input_shape"], torch.device("cpu")
    )
    hop = sum(t.numel() * t.element_size() for t in method.shared_state().values())
    assert hop > 0 and f"examples.fedprox:FedProx, {hop / 1e6:.3f} MB per hop" in out
    assert not imported_ray


@needs_data
def test_dry_run_sizes_a_lap_methods_token():
    overrides = [f"data.root={DATA_ROOT}", "algorithm.name=fedavg"]
    out, imported_ray = run("--dry-run", *overrides)
    config = load_config(REPO / "jobs/configs/quickstart.yaml", overrides)
    facts = dataset_facts(config.data.dataset, config.data.root)
    method = build_algorithm(
        config, 0, facts["num_classes"], facts["input_shape"], torch.device("cpu")
    )
    model = sum(t.numel() * t.element_size() for t in method.model.state_dict().values())
    token = re.search(r"ring lap:  'average', ([\d.]+) MB per token hop", out)
    assert token and abs(float(token.group(1)) - model / 1e6) < 0.01  # the model, and a weight
    assert not imported_ray


def train_on(ray_local, config, run_dir) -> tuple[subprocess.CompletedProcess, str]:
    """``python -m jobs.train`` on the test's Ray, as a user runs it: how it ended, and
    everything it printed."""
    config_file = run_dir.parent / f"{run_dir.name}.yaml"
    config_file.write_text(yaml.safe_dump(config.to_dict()))
    command = [sys.executable, "-m", "jobs.train", "--config", str(config_file), "--no-progress"]
    done = subprocess.run(
        [*command, "--output-dir", str(run_dir)],
        cwd=REPO,
        env={**os.environ, "RAY_ADDRESS": ray_local.get_runtime_context().gcs_address},
        capture_output=True,
        text=True,
        timeout=300,
    )
    return done, done.stdout + done.stderr


def test_a_run_whose_clients_all_crashed_says_what_it_did_without_rays_oom_notice(
    ray_local, tmp_path
):
    """Ray's notice of a dead worker blames the OOM killer; the run caused these crashes and
    handled them, and its own lines say so. Its last line counts what was done."""
    config = small_config(
        tmp_path,
        "clients.count=3",
        "data.dataset=fashion-mnist-sample",
        "algorithm.name=fedavg",
        "experiment.rounds=4",
        "faults=[{at_round: 2, crash: [0, 1, 2]}]",  # every client, once it finished round 1
    )
    run_dir = tmp_path / "run"
    done, out = train_on(ray_local, config, run_dir)
    assert done.returncode == 1 and "run stopped: no client can go on" in out, out
    assert "A worker died or was killed" not in out
    assert all(f"crash: client {c} crashed" in out for c in range(3))  # the run's own lines
    rounds = json.loads((run_dir / "summary.json").read_text())["rounds_completed"]
    assert rounds >= 1 and f"fedavg on fashion-mnist-sample: {rounds} of 4 rounds" in out
    assert "mlflow:  off (tracking.enabled: false" in out and "run None" not in out
    # Their hops, from the rounds they reported before crashing: none finished to count them.
    assert "MB per hop" in out and "0.000 MB per hop" not in out


def test_a_restarted_clients_second_crash_shows_no_ray_notice_either(ray_local, tmp_path):
    """Ray restarts a crashed client in a new process (``clients.max_restarts``); when that
    process crashes too, its death is the run's to tell as much as the first one was."""
    config = small_config(
        tmp_path,
        "clients.count=3",
        "clients.max_restarts=1",
        "data.dataset=fashion-mnist-sample",
        "algorithm.name=fedavg",
        "experiment.rounds=5",
        "faults=[{at_round: 1, crash: [1]}, {at_round: 3, crash: [1]}]",
    )
    run_dir = tmp_path / "run"
    done, out = train_on(ray_local, config, run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    events = summary["events"]
    # One rejoin for the restart; on a loaded machine the restart can outlast the hang check,
    # and the client heard from again is one rejoin more.
    assert done.returncode == 0 and events["rejoins"] == 1 + events["hangs"], out
    assert events["crashes"] == 2 and summary["ring_order"] == [0, 2], out
    assert "A worker died or was killed" not in out
