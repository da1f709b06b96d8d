"""The control plane (the coordinator and the slot pools) imports neither torch nor any
method's module, on real Ray workers: only clients compute, and only they pay for torch."""

from __future__ import annotations

import pickle
import subprocess
import sys

import pytest
import ray

from ring_actors.config import load_config
from ring_actors.runtime.driver import launch, shutdown, wait_and_finalize
from tests.conftest import LIGHT, needs_data, small_config


def _method_modules(modules: list[str]) -> list[str]:
    return [m for m in modules if m == "torch" or m.startswith("ring_actors.algorithms")]


@needs_data
@pytest.mark.slow
def test_coordinator_and_slot_pool_never_import_torch_or_a_method(ray_local, tmp_path):
    config = small_config(
        tmp_path, *LIGHT, "clients.count=3", "experiment.rounds=2", "algorithm.name=drdfl"
    )
    experiment = launch(config, tmp_path / "out")
    try:
        ray.get(experiment.coordinator.start_clients.remote())
        (pool,) = experiment.slot_pools.values()
        summary = wait_and_finalize(experiment, 0.0, progress=False)
        assert summary["rounds_completed"] == 2  # the run went through: config, slots
        coordinator = ray.get(experiment.coordinator.loaded_modules.remote())
        slot_pool = ray.get(pool.loaded_modules.remote())
        client = ray.get(experiment.clients[0].loaded_modules.remote())
    finally:
        shutdown(experiment)
    assert "ring_actors.runtime.coordinator_actor" in coordinator
    assert "ring_actors.runtime.slots" in slot_pool
    assert _method_modules(coordinator) == []
    assert _method_modules(slot_pool) == []
    assert {"torch", "ring_actors.algorithms.drdfl"} <= set(client)  # the check can fail
    # Tracking and figures off (``small_config``): the coordinator never loads either.
    assert not [m for m in coordinator if m.split(".")[0] in ("mlflow", "matplotlib")]
    assert summary["mlflow"] == {"tracking_uri": None, "run_id": None}
    assert not list((tmp_path / "out").glob("*.png"))


@pytest.mark.slow
def test_a_config_travels_without_its_method_and_is_rebuilt_where_read(tmp_path):
    config = load_config(None, ["algorithm.name=drdfl", "algorithm.lr=0.05"])
    blob = pickle.dumps(config)
    probe = (
        "import pickle, sys; config = pickle.loads(sys.stdin.buffer.read()); "
        "params = config.to_dict()['algorithm']; "
        "before = 'torch' in sys.modules or 'ring_actors.algorithms' in sys.modules; "
        "lr = config.algorithm.options.lr; "
        "print(before, params['lr'], lr, type(config.algorithm.options).__name__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], input=blob, capture_output=True, check=True
    ).stdout.decode()
    assert out.split() == ["False", "0.05", "0.05", "DRDFLOptions"]
    assert pickle.loads(blob) == config
