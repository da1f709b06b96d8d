"""Shared fixtures: the real datasets, a small local Ray instance, a run's config.

Tests that only need some real Fashion-MNIST read the sample shipped in the package
(``SAMPLE``), so they run on a fresh clone offline. Tests calibrated on the full archives are
marked ``needs_data``: they run when ``$RING_ACTORS_DATA`` (CI: ``../shared/datasets``) or the
user's data cache holds them, and are skipped with that reason otherwise.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import settings

from ring_actors.config import Config, apply_overrides, config_from_dict
from ring_actors.data.sources import dataset_facts, resolve_root

# Property tests: 100 examples each on every run (their inputs repeat well before 300), as
# many as asked for with HYPOTHESIS_PROFILE=thorough; no deadline (a loaded machine is slow).
settings.register_profile("suite", max_examples=100, deadline=None)
settings.register_profile("thorough", max_examples=1000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "suite"))

SAMPLE = "fashion-mnist-sample"
# Where the full archives are looked for: $RING_ACTORS_DATA, else the user's data cache.
DATA_ROOT = str(resolve_root(None))

needs_data = pytest.mark.skipif(
    not dataset_facts("fashion-mnist", DATA_ROOT)["present"],
    reason=f"needs the full dataset archives, not found under {DATA_ROOT}: "
    "set RING_ACTORS_DATA to a folder holding them (CI uses ../shared/datasets)",
)


LOCAL_RAY = dict(
    address="local",  # a fresh instance, even if another Ray runs on this machine
    num_cpus=2,
    num_gpus=1,
    include_dashboard=False,
    log_to_driver=False,
    configure_logging=False,
)


def _module(item: pytest.Item) -> str:
    return item.nodeid.split("::")[0]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules that use ``ray_local`` run last, one after another on their worker, so
    that one Ray serves them all (a start and a stop cost 6-10 s). Each module's tests keep
    their order."""
    on_ray = {_module(item) for item in items if "ray_local" in item.fixturenames}
    items.sort(key=lambda item: _module(item) in on_ray)


def pytest_sessionfinish() -> None:
    """The shared Ray stops with the session."""
    if "ray" in sys.modules and sys.modules["ray"].is_initialized():
        sys.modules["ray"].shutdown()


def _left_clean(ray: ModuleType, wait_s: float = 10.0) -> bool:
    """Whether every CPU and GPU is free again and no named actor (a run's coordinator or
    client) is alive, waiting for kills, which are asynchronous, to land."""
    deadline = time.monotonic() + wait_s
    while True:
        free, total = ray.available_resources(), ray.cluster_resources()
        freed = all(free.get(key, 0) >= total[key] for key in ("CPU", "GPU") if key in total)
        if freed and not ray.util.list_named_actors(all_namespaces=True):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)


CLUSTERS = pytest.mark.xdist_group("clusters")  # the modules that start Ray clusters


@pytest.fixture(scope="module")
def ray_local():
    """A local Ray of 2 CPUs and 1 logical GPU (no real GPU needed), shared by the modules
    that ask for it. A module that leaves a CPU or GPU held, or a named actor alive, gets
    the next module a fresh instance."""
    import ray

    from ring_actors.runtime.worker_env import start_local_ray

    if not ray.is_initialized():
        start_local_ray(**LOCAL_RAY)
    yield ray
    if not _left_clean(ray):
        ray.shutdown()


@pytest.fixture
def no_ray() -> None:
    """No Ray in this process: a test that asserts none was started ends the one an earlier
    module shared (the next module that asks for ``ray_local`` starts another)."""
    import ray

    ray.shutdown()


# For a test of what a run does with faults, joins and resumes rather than what it learns: a
# third of the test ring's data, where most of a round's CPU goes.
LIGHT = (
    "data.max_train_per_client=100",
    "eval.global_max_samples=100",
    "eval.local_max_samples=100",
)


# For a test of what a run keeps in MLflow, or of its figures; and for a command line's run
# whose test is about neither.
TRACKED = ("tracking.enabled=true", "tracking.figures=true")
UNTRACKED = ("tracking.enabled=false", "tracking.figures=false")


def _store_uri(path: Path) -> str:
    """A store a test's earlier config already made keeps its runs; else an empty one."""
    return f"sqlite:///{path}" if path.exists() else fresh_store(path)


def small_config(tmp_path: Path, *overrides: str) -> Config:
    """A fast ring on Fashion-MNIST (few samples and rounds; MLflow, when ``TRACKED``, in
    ``tmp_path``)."""
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
        # No MLflow run and no figures (3.4 and 2.3 core-s a run): a test of them says TRACKED.
        "tracking": {"uri": _store_uri(tmp_path / "mlflow.db"), "enabled": False, "figures": False},
        # Each round's state on disk: the tests that cut or restart a client at a round say
        # which; a case of another cadence overrides it.
        "checkpoint": {"every_rounds": 1},
    }
    return config_from_dict(apply_overrides(base, overrides))


_STORES = tempfile.TemporaryDirectory(prefix="ring-actors-mlflow-")


@functools.cache
def _empty_store() -> Path:
    """An empty SQLite tracking store, built once per test process: MLflow's migrations
    cost about 2 core-seconds, paid by every run that builds its store anew."""
    from ring_actors.coordinator.tracking import create_sqlite_store

    path = Path(_STORES.name) / "mlflow.db"
    create_sqlite_store(f"sqlite:///{path}")
    return path


def fresh_store(path: Path) -> str:
    """The URI of a real, empty SQLite tracking store of a test's own at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_empty_store(), path)
    return f"sqlite:///{path}"


@pytest.fixture
def mlflow_uri(tmp_path: Path) -> str:
    """A real SQLite tracking store of the test's own, in ``tmp_path/mlflow.db``."""
    return fresh_store(tmp_path / "mlflow.db")
