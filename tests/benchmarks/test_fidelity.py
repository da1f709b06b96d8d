"""The fidelity benchmark's runs are the in-process ring's: its per-round records are the
coordinator's rows, client for client, as a run of the same config gives them. Its figures
are the report's own."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient

from benchmarks.fidelity import as_report_run, main
from benchmarks.fidelity_ring import Setting, round_records, run_config, run_ring, shared_spread
from ring_actors.data.client_splits import split_for
from ring_actors.data.partition_file import partition_digest
from ring_actors.data.sources import load_dataset
from ring_actors.in_process import InProcessRing
from tests.conftest import DATA_ROOT, needs_data

SETTING = Setting(
    root=str(DATA_ROOT),
    clients=3,
    samples=60,
    rounds=3,
    eval_every=5,
    last=2,
    global_max=150,
    local_max=100_000,  # every client's whole test split, as a run of the config has it
)


@needs_data
@pytest.mark.slow
def test_the_benchmark_s_rounds_are_those_of_a_ring_run_of_its_config(tmp_path):
    torch.set_num_threads(1)
    arrays = load_dataset("fashion-mnist", DATA_ROOT, download=False)
    run = run_ring("dfedavg", {"lr": 0.01}, SETTING, arrays, seed=0)
    assert [r["round"] for r in run["rounds"]] == [1, 2]  # the last two; none every 5th
    config = run_config(SETTING, seed=0, method="dfedavg", options={"lr": 0.01})
    assert config.algorithm.options.lr == 0.01 and config.schedule.mode == "sync"
    ring = InProcessRing.from_config(config, tmp_path)
    assert ring.run(timeout_s=120)["rounds_completed"] == SETTING.rounds
    again = round_records(ring.coordinator.results.rows)
    for ours, theirs in zip(run["rounds"], again, strict=True):
        assert ours["local"] == theirs["local"] and ours["global"] == theirs["global"]
        assert ours["local_paths"] == {"acc": ours["local"]}
        assert ours["mb_sent"] == theirs["mb_sent"] and min(ours["mb_sent"]) > 0
    spread = run["rounds"][-1]["shared_spread"]
    assert set(spread) == {"body", "head"}
    assert all(0 < value < 1 for value in spread.values())  # a ring mixes, not equalises
    # the run wrote its split; loaded, it is the benchmark's
    written = split_for(
        run_config(
            dataclasses.replace(SETTING, partition=f"file:{tmp_path / 'partition.json'}"), 0
        ),
        arrays,
    )
    assert partition_digest(written) == partition_digest(split_for(run_config(SETTING, 0), arrays))


def test_rows_become_per_round_records_in_client_order():
    def row(client: int, round_: int, acc: float) -> dict:
        return {
            "client": client, "round": round_, "time_s": 1.0, "local_acc": acc,
            "local_acc_gmm": acc / 2, "global_acc": acc / 4, "diag_gain": 3.0,
            "loss": 0.5, "bytes_sent": 2e6,
        }  # fmt: skip

    records = round_records([row(1, 4, 0.8), row(0, 4, 0.6), row(0, 9, 1.0), row(1, 9, 0.4)])
    assert [r["round"] for r in records] == [4, 9]
    first = records[0]
    assert first["local"] == [0.6, 0.8] and first["global"] == [0.15, 0.2]
    assert first["local_paths"] == {"acc": [0.6, 0.8], "acc_gmm": [0.3, 0.4]}
    assert first["global_paths"] == {"acc": [0.15, 0.2]}
    assert first["diagnostics"] == {"gain": [3.0, 3.0]} and first["mb_sent"] == [2.0, 2.0]
    assert first["client_metrics"] == [{"loss": 0.5, "bytes_sent": 2e6}] * 2
    assert first["train_metrics"] == {"bytes_sent": 2e6, "loss": 0.5}


def test_a_benchmark_run_reads_as_a_report_run():
    setting = dataclasses.replace(SETTING, partition="dirichlet:0.3", rounds=4)
    rounds = [
        {"round": 1, "local": [0.5, 0.7], "global": [0.2, 0.4]},
        {"round": 3, "local": [0.9, 1.0], "global": [0.3, 0.5]},
    ]
    run = {"spec": "drdfl:@exchange=none", "seed": 2, "rounds": rounds}
    report_run = as_report_run({**run, "setting": dataclasses.asdict(setting)})
    assert report_run.method == "drdfl:@exchange=none"
    assert (report_run.dataset, report_run.partition) == ("fashion-mnist", "dir β=0.3")
    assert report_run.seed == 2 and report_run.partial is None
    assert [(r.client, r.round, r.global_acc) for r in report_run.rows] == [
        (0, 1, 0.2), (1, 1, 0.4), (0, 3, 0.3), (1, 3, 0.5),
    ]  # fmt: skip


@needs_data
@pytest.mark.slow
def test_the_benchmark_logs_accuracy_curves_to_mlflow(tmp_path, mlflow_uri):
    torch.set_num_threads(1)
    main(
        ["--methods", "local", "fedavg", "--seeds", "0", "1", "--root", str(DATA_ROOT)]
        + ["--clients", "2", "--samples", "40", "--rounds", "2", "--eval-every", "1"]
        + ["--last", "1", "--global-max", "50", "--local-max", "50"]
        + ["--out", str(tmp_path / "runs.json"), "--figures", str(tmp_path / "figures")]
        + ["--mlflow-uri", mlflow_uri, "--experiment", "fidelity-test"]
    )
    figures = sorted(p.name for p in (tmp_path / "figures").iterdir())
    assert figures == ["curves-fashion-mnist_shard_s2.png"]
    client = MlflowClient(tracking_uri=mlflow_uri)
    experiment = client.get_experiment_by_name("fidelity-test")
    (logged,) = client.search_runs([experiment.experiment_id])
    assert [a.path for a in client.list_artifacts(logged.info.run_id)] == figures


@needs_data
@pytest.mark.slow
def test_arms_record_their_partition_and_a_recorded_one_runs_again_the_same(tmp_path):
    torch.set_num_threads(1)
    common = ["--seeds", "0", "1", "--root", str(DATA_ROOT), "--clients", "2"]
    common += ["--samples", "40", "--rounds", "1", "--eval-every", "1", "--last", "1"]
    common += ["--global-max", "50", "--local-max", "50", "--partition", "dirichlet:0.5"]
    main(["--methods", "local", "--out", str(tmp_path / "a.json"), *common])
    first = json.loads((tmp_path / "a.json").read_text())["runs"]
    paths = [run["partition"]["path"] for run in first]
    assert paths[0] != paths[1] and all(Path(p).is_file() for p in paths)
    template = paths[0].replace("seed0", "seed{seed}")
    again = ["--methods", "local", "--out", str(tmp_path / "b.json"), *common]
    again[again.index("dirichlet:0.5")] = f"file:{template}"
    main(again)
    second = json.loads((tmp_path / "b.json").read_text())["runs"]
    assert [r["partition"]["path"] for r in second] == paths
    assert [r["partition"]["sha256"] for r in second] == [r["partition"]["sha256"] for r in first]

    def computed(runs: list[dict]) -> list[tuple]:  # what was learned, not how long it took
        return [
            (r["local"], r["global"], [m["loss"] for m in r["client_metrics"]])
            for run in runs
            for r in run["rounds"]
        ]

    assert computed(second) == computed(first)


def test_shared_spread_is_zero_for_equal_clients_and_scales_with_their_distance():
    same = [{"learngene.w": torch.ones(3), "class_means": torch.ones(2)} for _ in range(3)]
    assert shared_spread(same) == {"learngene": 0.0, "class_means": 0.0}
    apart = [{"g.w": torch.tensor([1.0, 0.0])}, {"g.w": torch.tensor([-1.0, 0.0])}]
    # mean (0, 0): each client 1 away, each of norm 1
    assert shared_spread(apart) == {"g": pytest.approx(1.0)}
    assert shared_spread([{"n": torch.tensor([1, 2])}] * 2) == {}  # integer tensors skipped
