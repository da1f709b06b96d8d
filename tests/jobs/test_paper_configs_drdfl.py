"""The DRDFL paper-reproduction configs: valid, at the papers' settings, covering every cell.

Fast and Ray-free: configs are loaded and validated, partitions are drawn on synthetic labels
with each dataset's real class counts, and DRDFL is built at the paper scale on the CPU.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from ring_actors.config import Config, load_config
from tests.jobs.paper_cells import (
    NUM_CLASSES,
    PAPER_DIR,
    drawn_partition,
    paper_configs,
    predicts_on_cpu,
)

PATHS, IDS = paper_configs("drdfl-*.yaml")
SHARDS = {"svhn": {4, 5}, "cifar10": {4, 5}, "cifar100": {20, 30}}
BETAS = {0.1, 0.4}


def load(path: Path) -> Config:
    return load_config(path)


def cell(cfg: Config) -> tuple[str, str, float]:
    """(dataset, partition kind, beta or classes per client) of a config."""
    part = cfg.data.partition
    value = part.beta if part.kind == "dirichlet" else part.classes_per_client
    return cfg.data.dataset, part.kind, value


def is_main(cfg: Config) -> bool:
    opts = cfg.algorithm.options
    return cfg.clients.count == 20 and opts.use_pr and opts.use_gl


@pytest.fixture(scope="module")
def configs() -> dict[str, Config]:
    return {p.stem: load(p) for p in PATHS}


def test_paper_configs_exist():
    assert len(PATHS) >= 17, f"expected the paper configs in {PAPER_DIR}"


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_config_loads_with_paper_settings(path: Path):
    cfg = load(path)
    opts = cfg.algorithm.options
    assert cfg.algorithm.name == "drdfl"
    assert cfg.experiment.rounds == 300
    assert cfg.experiment.seed == 0
    assert cfg.clients.count in (20, 50)
    assert cfg.clients.local_epochs == 5
    assert cfg.clients.batch_size == 64
    assert opts.backbone == "resnet18"
    assert math.isclose(opts.lr, 1e-3)
    assert math.isclose(opts.alpha, 0.99)
    assert math.isclose(opts.noise_var, 0.15)
    assert opts.merge == "average"  # the notes' choice for synchronous rounds
    assert cfg.schedule.mode == "sync"
    assert cfg.topology.kind == "ring"
    assert cfg.eval.every == 1
    assert cfg.eval.global_max_samples is None
    assert cfg.data.max_train_per_client is None
    assert cfg.data.root is None and cfg.data.download
    assert cfg.tracking.uri is None
    assert cfg.faults == ()
    assert cfg.data.dataset in NUM_CLASSES
    assert cfg.data.partition.kind in ("dirichlet", "shard")


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_all_clients_share_one_gpu(path: Path):
    clients = load(path).clients
    assert clients.num_gpus > 0 and clients.count * clients.num_gpus <= 1.0 + 1e-9
    assert clients.count * clients.num_cpus <= 16  # fits a 16-core GPU node


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_header_names_the_paper_cell_and_its_results(path: Path):
    lines = path.read_text().splitlines()
    assert lines[0].startswith("# ")
    header = "\n".join(line for line in lines if line.startswith("#"))
    assert "Local-T" in header and "Global-T" in header
    assert "Table" in header or "Fig." in header


def test_experiment_names_are_unique(configs):
    names = [cfg.experiment.name for cfg in configs.values()]
    assert len(names) == len(set(names))


def test_main_tables_are_covered(configs):
    cells = {cell(cfg) for cfg in configs.values() if is_main(cfg)}
    for dataset, shards in SHARDS.items():
        for beta in BETAS:
            assert (dataset, "dirichlet", beta) in cells, f"{dataset} beta={beta}"
        for s in shards:
            assert (dataset, "shard", s) in cells, f"{dataset} s={s}"


def test_ablations_drop_one_loss(configs):
    found = set()
    for stem, cfg in configs.items():
        opts = cfg.algorithm.options
        if stem.endswith("-no-pr"):
            assert not opts.use_pr and opts.use_gl
            found.add((*cell(cfg), "pr"))
        elif stem.endswith("-no-gl"):
            assert opts.use_pr and not opts.use_gl
            found.add((*cell(cfg), "gl"))
        else:
            assert opts.use_pr and opts.use_gl
    for off in ("pr", "gl"):  # 000 Table 5 / 004 Table III: CIFAR-10, s = 4 and beta = 0.1
        assert ("cifar10", "shard", 4, off) in found
        assert ("cifar10", "dirichlet", 0.1, off) in found


def test_fifty_client_run(configs):
    big = [cfg for cfg in configs.values() if cfg.clients.count == 50]
    assert [cell(cfg) for cfg in big] == [("cifar10", "shard", 4)]


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_partition_can_be_drawn(path: Path):
    """The partition fits the dataset's real class counts (synthetic labels, no download)."""
    drawn_partition(load(path))


def representatives() -> list[Path]:
    """One full-method 20-client config per dataset."""
    chosen: dict[str, Path] = {}
    for path in PATHS:
        cfg = load(path)
        if is_main(cfg):
            chosen.setdefault(cfg.data.dataset, path)
    return [chosen[d] for d in sorted(chosen)]


def test_every_dataset_has_a_representative():
    assert sorted(load(p).data.dataset for p in representatives()) == sorted(NUM_CLASSES)


@pytest.mark.parametrize("path", representatives(), ids=lambda p: p.stem)
def test_algorithm_builds_and_predicts_on_cpu(path: Path):
    algo, _ = predicts_on_cpu(load(path))
    # The message is about the papers' 0.58 M values (Learngene plus the class Gaussians).
    shared = sum(t.numel() for t in algo.shared_state().values())
    assert 0.55e6 < shared < 0.62e6
