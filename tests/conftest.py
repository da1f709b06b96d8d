"""Shared fixtures: the real datasets, a small local Ray instance, a run's config.

Tests that only need some real Fashion-MNIST read the sample shipped in the package
(``SAMPLE``), so they run on a fresh clone offline. Tests calibrated on the full archives are
marked ``needs_data``: they run when ``$RING_ACTORS_DATA`` (CI: ``../shared/datasets``) or the
user's data cache holds them, and are skipped with that reason otherwise.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ring_actors.config import Config, apply_overrides, config_from_dict
from ring_actors.data.sources import dataset_facts, resolve_root

SAMPLE = "fashion-mnist-sample"
# Where the full archives are looked for: $RING_ACTORS_DATA, else the user's data cache.
DATA_ROOT = str(resolve_root(None))

needs_data = pytest.mark.skipif(
    not dataset_facts("fashion-mnist", DATA_ROOT)["present"],
    reason=f"needs the full dataset archives, not found under {DATA_ROOT}: "
    "set RING_ACTORS_DATA to a folder holding them (CI uses ../shared/datasets)",
)


RAY_FIXTURE = "ray_local"


@pytest.fixture(scope="module")
def ray_local(request: pytest.FixtureRequest):
    """A local Ray of 2 CPUs and 1 logical GPU (no real GPU needed). Starting one costs
    seconds, so modules that follow each other in the run share one: it is shut down after
    a module unless the next module starts with a test that asks for it, and only while
    nothing the module left holds its resources (an actor, a slot pool, a named actor: the
    next module would wait for them)."""
    import ray

    if not ray.is_initialized():
        ray.init(
            address="local",  # a fresh instance, even if another Ray runs on this machine
            num_cpus=2,
            num_gpus=1,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
        )
    yield ray
    if not (_next_module_wants_ray(request) and _all_resources_free(ray)):
        ray.shutdown()


def _next_module_wants_ray(request: pytest.FixtureRequest) -> bool:
    """Whether the module run right after this one asks for ``ray_local`` in its first
    test, so that every test sees a Ray up exactly when it would with one per module."""
    items, module = request.session.items, request.node.path
    last = max(i for i, item in enumerate(items) if item.path == module)
    return last + 1 < len(items) and RAY_FIXTURE in items[last + 1].fixturenames


def _all_resources_free(ray, wait_s: float = 5.0) -> bool:
    """Every CPU and GPU free again (a killed actor's come back within moments)."""
    import time

    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        total, free = ray.cluster_resources(), ray.available_resources()
        if all(free.get(key, 0) >= total[key] for key in ("CPU", "GPU") if key in total):
            return not ray.util.list_named_actors(all_namespaces=True)
        time.sleep(0.1)
    return False


def small_config(tmp_path: Path, *overrides: str) -> Config:
    """A fast ring on Fashion-MNIST (few samples and rounds, MLflow in ``tmp_path``)."""
    base = {
        "experiment": {"name": "test", "seed": 0, "rounds": 3},
        "data": {
            "dataset": "fashion-mnist",
            "root": DATA_ROOT,
            "download": False,
            "max_train_per_client": 300,
            "partition": {"kind": "shard", "classes_per_client": 2},
        },
        "clients": {"count": 4, "num_cpus": 0.5, "local_epochs": 1, "batch_size": 32},
        "algorithm": {"name": "dfedavg", "lr": 0.002},
        "schedule": {"mode": "sync", "hop_timeout_s": 20},
        "eval": {"every": 1, "global_max_samples": 500},
        "tracking": {"uri": f"sqlite:///{tmp_path / 'mlflow.db'}"},
    }
    return config_from_dict(apply_overrides(base, overrides))


@pytest.fixture(scope="session")
def empty_mlflow_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty SQLite tracking store, built once: MLflow's migrations take about a second."""
    from ring_actors.coordinator.tracking import create_sqlite_store

    path = tmp_path_factory.mktemp("mlflow-store") / "mlflow.db"
    create_sqlite_store(f"sqlite:///{path}")
    return path


@pytest.fixture
def mlflow_uri(tmp_path: Path, empty_mlflow_store: Path) -> str:
    """A real SQLite tracking store of the test's own, in ``tmp_path/mlflow.db``."""
    path = tmp_path / "mlflow.db"
    shutil.copyfile(empty_mlflow_store, path)
    return f"sqlite:///{path}"
