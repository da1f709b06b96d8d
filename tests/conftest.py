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


@pytest.fixture(scope="module")
def ray_local():
    """One Ray instance per test module: 2 CPUs and 1 logical GPU (no real GPU needed)."""
    import ray

    ray.init(
        address="local",  # a fresh instance, even if another Ray runs on this machine
        num_cpus=2,
        num_gpus=1,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
    )
    yield ray
    ray.shutdown()


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
        "eval": {"every": 1, "global_max_samples": 300, "local_max_samples": 200},
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
