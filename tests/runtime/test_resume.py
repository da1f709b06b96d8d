"""A run whose driver died continues from its checkpoints: same outputs, same MLflow run,
and (sync, a deterministic method) the same final models as a run never interrupted."""

from __future__ import annotations

import json
import time

import pyarrow.parquet as pq
import pytest
import ray
import torch

from ring_actors.run_checks import RunFolderError
from ring_actors.runtime.driver import launch, run_experiment, shutdown
from tests.conftest import needs_data, small_config

pytestmark = [needs_data, pytest.mark.slow]

SETTING = (
    "clients.count=3",
    "experiment.rounds=6",
    "schedule.hop_timeout_s=8",
    # Client 1 dawdles from round 4: its successor and client 0 run ahead, and the cut comes
    # at the widest spread a sync ring of three allows (0 at round 5, 2 at 4, 1 at 3).
    "faults=[{at_round: 0, slow: [0, 1, 2], delay_s: 0.5}, {at_round: 4, slow: [1], delay_s: 4}]",
)
SPREAD = {(0, 5), (2, 4)}


def rounds_written(run_dir) -> set[tuple[int, int]]:
    path = run_dir / "metrics.parquet"
    if not path.exists():
        return set()
    return {(r["client"], r["round"]) for r in pq.read_table(path).to_pylist()}


def final_models(run_dir) -> dict[int, dict[str, torch.Tensor]]:
    models = {}
    for path in sorted((run_dir / "clients").glob("client-*.pt")):
        saved = torch.load(path, weights_only=False)
        assert saved["round"] == 5
        models[int(path.stem.split("-")[1])] = saved["algorithm"].model.state_dict()
    return models


def test_a_run_whose_driver_died_resumes_to_the_same_result(ray_local, tmp_path):
    whole = run_experiment(small_config(tmp_path, *SETTING), tmp_path / "whole", progress=False)

    config = small_config(tmp_path, *SETTING)
    run_dir = tmp_path / "cut"
    experiment = launch(config, run_dir)
    ray.get(experiment.coordinator.start_clients.remote())
    deadline = time.monotonic() + 300
    while rounds_written(run_dir) < SPREAD | {(c, r) for c in range(3) for r in range(3)}:
        assert time.monotonic() < deadline  # the tables follow the run within seconds
        time.sleep(0.2)
    shutdown(experiment)  # the driver dies: every actor of the run goes with it
    assert json.loads((run_dir / "summary.json").read_text())["partial"] is True
    run_id = json.loads((run_dir / "coordinator.json").read_text())["run_id"]

    resumed = run_experiment(config, run_dir, progress=False, resume=True)
    assert resumed["rounds_completed"] == 6 and resumed["events"]["lost_payloads"] == 0
    assert resumed["mlflow"]["run_id"] == run_id  # the same MLflow run, continued
    rows = pq.read_table(run_dir / "metrics.parquet").to_pylist()
    assert sorted((r["client"], r["round"]) for r in rows) == [
        (c, r) for c in range(3) for r in range(6)
    ]  # every round once: the ones before the cut kept, the rest appended
    kinds = [e["kind"] for e in pq.read_table(run_dir / "events.parquet").to_pylist()]
    assert "run_resumed" in kinds
    assert json.loads((run_dir / "summary.json").read_text())["partial"] is False
    expected, got = final_models(tmp_path / "whole"), final_models(run_dir)
    for client, state in expected.items():
        for name, tensor in state.items():
            assert torch.allclose(tensor, got[client][name], atol=1e-6), (client, name)
    assert whole["local_acc"]["per_client"] == pytest.approx(resumed["local_acc"]["per_client"])


def test_resuming_a_directory_without_a_run_is_refused(ray_local, tmp_path):
    with pytest.raises(RunFolderError, match="no run to resume"):
        launch(small_config(tmp_path, *SETTING), tmp_path / "empty", resume=True)
