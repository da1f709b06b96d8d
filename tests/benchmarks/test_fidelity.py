"""The fidelity simulator is trusted only as far as it computes what the runtime computes: on
one small setting it must give the in-process ring's accuracies, client for client, for each
way a method exchanges (pushes, a ring lap, offers with pulls). Its figures are the report's
own, drawn from the simulated rounds."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from mlflow.tracking import MlflowClient

from benchmarks.fidelity import Setting, as_report_run, main, run_config, simulate
from ring_actors.data.sources import load_dataset
from ring_actors.in_process import InProcessRing
from tests.conftest import DATA_ROOT, needs_data

SETTING = Setting(
    root=str(DATA_ROOT),
    clients=3,
    samples=60,
    rounds=3,
    eval_every=1,
    last=1,
    global_max=150,
    local_max=100_000,  # every client's whole test split, as the runtime evaluates
)


@needs_data
@pytest.mark.slow
@pytest.mark.parametrize("method", ["dfedavg", "fedavg", "ua_pdfl"])
def test_the_simulation_gives_the_ring_its_accuracies(tmp_path, method):
    torch.set_num_threads(1)
    arrays = load_dataset("fashion-mnist", DATA_ROOT, download=False)
    simulated = simulate(method, {}, SETTING, arrays, seed=0)["rounds"][-1]
    ring = InProcessRing.from_config(run_config(SETTING, seed=0, method=method), tmp_path)
    summary = ring.run(timeout_s=120)
    assert summary["rounds_completed"] == SETTING.rounds
    final = sorted(
        (r for r in ring.coordinator.rows if r["round"] == SETTING.rounds - 1),
        key=lambda r: r["client"],
    )
    assert [r["local_acc"] for r in final] == simulated["local"]
    assert [r["global_acc"] for r in final] == simulated["global"]


def test_a_simulated_run_reads_as_a_report_run():
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
