"""The quickstart's reference: one setting, every seed of every method, as jobs.train reads it."""

from __future__ import annotations

import pytest

from benchmarks.quickstart_reference import reference
from jobs.train import DEFAULT_CONFIG
from ring_actors.config import load_config
from ring_actors.run_setting import METHOD, setting_keys


def run(method, seed, global_acc, **setting):
    keys = {**setting_keys(load_config(DEFAULT_CONFIG).to_dict(), METHOD), **setting}
    return {"method": method, "seed": seed, "setting": keys, "local_acc": 0.8,
            "global_acc": global_acc}  # fmt: skip


def test_the_setting_leaves_out_method_seed_and_tracking_but_keeps_the_faults():
    config = load_config(DEFAULT_CONFIG, ["experiment.seed=3", "tracking.uri=sqlite:///x.db"])
    keys = setting_keys(config.to_dict(), METHOD)
    assert keys == setting_keys(
        load_config(DEFAULT_CONFIG, ["algorithm.name=local"]).to_dict(), METHOD
    )
    assert not [k for k in keys if k.startswith(("algorithm.", "tracking.", "experiment.seed"))]
    assert keys["faults"] == config.to_dict()["faults"] and keys["schedule.mode"] == "async"


def test_the_reference_is_the_mean_and_spread_over_seeds():
    runs = [run("local", s, g) for s, g in ((0, 0.4), (1, 0.5))]
    runs += [run("fedavg", s, g) for s, g in ((1, 0.7), (0, 0.6))]
    record = reference(runs, "cmd")
    assert record["seeds"] == [0, 1] and record["command"] == "cmd"
    assert record["methods"]["local"]["global_acc"]["mean"] == pytest.approx(0.45)
    assert record["methods"]["fedavg"]["global_acc"]["per_seed"] == [0.6, 0.7]  # by seed


def test_runs_of_two_settings_or_a_missing_seed_are_refused():
    with pytest.raises(SystemExit, match="one setting only"):
        reference([run("local", 0, 0.4), run("local", 1, 0.4, **{"clients.count": 9})], "cmd")
    with pytest.raises(SystemExit, match="fedavg: seeds"):
        reference([run("local", 0, 0.4), run("local", 1, 0.4), run("fedavg", 0, 0.6)], "cmd")
