"""The printed table: per-client accuracies, then the run against ``local``'s recorded reference."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from benchmarks.fidelity import Setting, baseline
from jobs.train import DEFAULT_CONFIG, format_table
from ring_actors.config import load_config
from ring_actors.run_setting import METHOD, resolved_setting, setting_keys

QUICKSTART_BASELINE = DEFAULT_CONFIG.with_suffix(".baseline.json")


def fake_run(spec: str, local: float, global_: float) -> dict:
    """What ``benchmarks.fidelity_ring.run_ring`` records, reduced to one evaluated round."""
    return {"spec": spec, "rounds": [{"local": [local], "global": [global_], "mb_sent": [0.0]}]}


def summary(output_dir: Path, algorithm: str, local: float, global_: float) -> dict:
    return {
        "algorithm": algorithm,
        "output_dir": str(output_dir),
        "local_acc": {"mean": local, "per_client": {"0": local - 0.01, "1": local + 0.01}},
        "global_acc": {"mean": global_, "per_client": {"0": global_, "1": global_}},
    }


@pytest.fixture
def quickstart_run(tmp_path: Path) -> Path:
    """A run directory holding the quickstart's resolved config, as ``write_outputs`` leaves it."""
    config = load_config(DEFAULT_CONFIG).to_dict()
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return tmp_path


def reference_for(tmp_path: Path, setting: Setting) -> Path:
    """A baseline file for ``setting``: local at 80/50 and 82/48 over two seeds, fedavg 70/75."""
    runs = [
        fake_run("local", 0.80, 0.50),
        fake_run("local", 0.82, 0.48),
        fake_run("fedavg", 0.70, 0.75),
        fake_run("fedavg:lr=0.1", 0.10, 0.10),  # options: not a reference for the defaults
    ]
    record = baseline(runs, setting, [0, 1], "python -m benchmarks.fidelity --x")
    record["config"] = setting_keys(
        load_config(DEFAULT_CONFIG).to_dict(), METHOD
    )  # the quickstart's
    path = tmp_path / "ref.baseline.json"
    path.write_text(json.dumps(record))
    return path


def quickstart_setting() -> Setting:
    """The fidelity setting of the quickstart file's data, clients, rounds and evaluation."""
    config = load_config(DEFAULT_CONFIG)
    part = config.data.partition
    value = {"dirichlet": part.beta, "shard": part.classes_per_client}.get(part.kind)
    return Setting(
        dataset=config.data.dataset,
        clients=config.clients.count,
        partition=part.kind if value is None else f"{part.kind}:{value}",
        samples=config.data.max_train_per_client,
        rounds=config.experiment.rounds,
        local_epochs=config.clients.local_epochs,
        batch_size=config.clients.batch_size,
        topology=config.topology.kind,
        degree=config.topology.degree,
        global_max=config.eval.global_max_samples,
    )


def test_the_table_compares_the_run_with_locals_reference(quickstart_run, tmp_path):
    path = reference_for(tmp_path, quickstart_setting())
    text = format_table(summary(quickstart_run, "fedavg", 0.71, 0.74), path)
    lines = text.splitlines()
    assert lines[0].split() == ["client", "Local-T", "Global-T"]
    assert lines[1].split() == ["0", "70.00", "74.00"]
    assert lines[3].split() == ["mean", "71.00", "74.00"]
    assert "Global-T 74.00 against local's 49.00 ± 1.41: +25.00 points" in text
    assert "above local by more than twice its seed spread" in text
    assert "Local-T  71.00 against local's 81.00 ± 1.41" in text
    assert "reference, not measured in this run: seeds 0 1" in text
    assert "python -m benchmarks.fidelity --x" in text
    assert "gave fedavg (its default options) Global-T 75.00 ± 0.00" in text


def test_a_run_below_or_near_local_says_so(quickstart_run, tmp_path):
    path = reference_for(tmp_path, quickstart_setting())
    below = format_table(summary(quickstart_run, "drdfl", 0.95, 0.40), path)
    assert "-9.00 points, not above local" in below
    assert "gave drdfl" not in below  # no reference figure recorded for it
    near = format_table(summary(quickstart_run, "drdfl", 0.95, 0.50), path)
    assert "+1.00 points, above local's mean, within twice its seed spread" in near


def test_no_reference_when_the_setting_differs(quickstart_run, tmp_path):
    path = reference_for(tmp_path, quickstart_setting())
    config = yaml.safe_load((quickstart_run / "config.yaml").read_text())
    config["data"]["max_train_per_client"] = 123
    (quickstart_run / "config.yaml").write_text(yaml.safe_dump(config))
    text = format_table(summary(quickstart_run, "fedavg", 0.71, 0.74), path)
    assert "vs local: no reference for this setting" in text
    assert "against local's" not in text


def test_no_reference_without_a_baseline_file_or_a_run_config(quickstart_run, tmp_path):
    missing = format_table(summary(quickstart_run, "fedavg", 0.7, 0.7), tmp_path / "none.json")
    assert "vs local: no reference for this setting" in missing
    path = reference_for(tmp_path, quickstart_setting())
    no_config = format_table(summary(tmp_path / "elsewhere", "fedavg", 0.7, 0.7), path)
    assert "vs local: no reference for this setting" in no_config


def test_the_recorded_quickstart_reference_fits_the_quickstart():
    """Editing quickstart.yaml without re-recording its reference fails here."""
    recorded = json.loads(QUICKSTART_BASELINE.read_text())
    config = load_config(DEFAULT_CONFIG).to_dict()
    assert resolved_setting(recorded["config"], METHOD) == setting_keys(config, METHOD)
    assert {"faults", "schedule.mode", "data.dataset"} <= recorded["config"].keys()
    assert len(recorded["seeds"]) >= 3
    for method in ("local", config["algorithm"]["name"]):
        assert len(recorded["methods"][method]["global_acc"]["per_seed"]) == len(recorded["seeds"])


def test_the_quickstart_is_well_above_local_on_global_t():
    """The quickstart's point, as recorded: its method beats local by several seed spreads."""
    recorded = json.loads(QUICKSTART_BASELINE.read_text())
    local = recorded["methods"]["local"]["global_acc"]
    own = recorded["methods"][load_config(DEFAULT_CONFIG).algorithm.name]["global_acc"]
    spread = max(local["std"], own["std"])
    assert own["mean"] - local["mean"] > 3 * spread, (own, local)
    assert min(own["per_seed"]) > max(local["per_seed"])
