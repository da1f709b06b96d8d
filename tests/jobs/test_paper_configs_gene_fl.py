"""The GENE-FL paper-reproduction configs: valid, at the paper's settings, covering every cell.

Fast and Ray-free: configs are loaded and validated, both populations' partitions are drawn
on synthetic labels with each dataset's real class counts, and GENE-FL is built at the paper
scale on the CPU.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from ring_actors.config import Config, FaultSection, load_config
from tests.jobs.paper_cells import (
    CLASS_COUNTS,
    NUM_CLASSES,
    PAPER_DIR,
    drawn_partition,
    paper_configs,
    predicts_on_cpu,
)

PATHS, IDS = paper_configs("gene-fl-*.yaml")

# (dataset, partition, s or beta): Table I/II Comm (GB) and Acc, Table III/IV Acc (GENE-FL)
PAPER = {
    ("cifar10", "shard", 4): ("8.78", "71.45", "66.90"),
    ("cifar10", "shard", 5): ("10.33", "71.22", "67.76"),
    ("cifar100", "shard", 10): ("10.26", "46.84", "49.84"),
    ("cifar100", "shard", 20): ("10.45", "33.35", "37.85"),
    ("svhn", "shard", 4): ("11.19", "87.30", "89.03"),
    ("svhn", "shard", 5): ("11.22", "83.64", "90.47"),
    ("cifar10", "dirichlet", 0.1): ("11.54", "64.85", "63.85"),
    ("cifar10", "dirichlet", 0.5): ("15.73", "65.61", "61.44"),
    ("cifar100", "dirichlet", 0.1): ("10.73", "22.74", "23.62"),
    ("cifar100", "dirichlet", 0.5): ("12.45", "22.46", "18.73"),
    ("svhn", "dirichlet", 0.1): ("12.51", "63.53", "69.86"),
    ("svhn", "dirichlet", 0.5): ("10.54", "70.79", "77.11"),
}


def load(path: Path) -> Config:
    return load_config(path)


def cell(cfg: Config) -> tuple[str, str, float]:
    """(dataset, partition kind, beta or classes per client) of a config."""
    part = cfg.data.partition
    value = part.beta if part.kind == "dirichlet" else part.classes_per_client
    return cfg.data.dataset, part.kind, value


def joiners(cfg: Config) -> int:
    return cfg.total_clients - cfg.clients.count


def test_paper_configs_exist():
    assert len(PATHS) == len(PAPER), f"expected one config per cell in {PAPER_DIR}"


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_config_loads_with_paper_settings(path: Path):
    cfg = load(path)
    opts = cfg.algorithm.options
    assert cfg.algorithm.name == "gene_fl"
    assert cfg.experiment.rounds == 150  # 100 known rounds + 50 agnostic rounds
    assert cfg.experiment.seed == 0
    assert cfg.clients.count == 50
    assert cfg.faults == (FaultSection(at_round=100, join=50),)
    assert cfg.data.partition.joiner_classes == "other_half"
    assert cfg.clients.local_epochs == 10
    assert cfg.clients.batch_size == 64
    assert opts.backbone == "resnet18"
    assert opts.optimizer == "sgd"
    assert math.isclose(opts.lr, 0.01) and math.isclose(opts.momentum, 0.9)
    assert math.isclose(opts.lambda1, 0.5) and math.isclose(opts.lambda2, 0.05)
    assert math.isclose(opts.epsilon, 0.5)
    assert opts.clusters == 4 and opts.svd_rank == 5
    assert math.isclose(opts.participation, 0.2)  # 10 of 50 per round
    assert opts.known_rounds == 100
    assert opts.weighting == "count"  # Eq. 10 is a uniform mean
    assert cfg.schedule.mode == "sync"
    assert cfg.topology.kind == "ring"
    assert cfg.eval.every == 1
    assert cfg.data.max_train_per_client is None
    assert cfg.data.root is None and cfg.data.download
    assert cfg.tracking.uri is None
    assert cell(cfg) in PAPER


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_every_client_fits_one_gpu_node(path: Path):
    cfg = load(path)
    clients, everyone = cfg.clients, cfg.total_clients
    assert everyone == 100
    assert clients.num_gpus > 0 and everyone * clients.num_gpus <= 1.0 + 1e-9
    assert everyone * clients.num_cpus <= 16 + 1e-9  # a 16-core GPU node, joiners included


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_header_names_the_tables_and_the_papers_numbers(path: Path):
    lines = path.read_text().splitlines()
    assert lines[0].startswith("# ")
    header = "\n".join(line for line in lines if line.startswith("#"))
    cfg = load(path)
    known, agnostic = (
        ("Table I", "Table III")
        if cfg.data.partition.kind == "shard"
        else (
            "Table II",
            "Table IV",
        )
    )
    assert f"{known} " in header and f"{agnostic} " in header
    assert "Comm" in header and "Acc" in header and "Initia" in header
    for number in PAPER[cell(cfg)]:
        assert number in header, number


def test_experiment_names_are_unique():
    names = [load(p).experiment.name for p in PATHS]
    assert len(names) == len(set(names))


def test_tables_are_covered():
    assert {cell(load(p)) for p in PATHS} == set(PAPER)


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_both_populations_can_be_partitioned(path: Path):
    """Known clients on the lower half of the classes, joiners on the upper half."""
    cfg = load(path)
    splits = drawn_partition(cfg)
    half = NUM_CLASSES[cfg.data.dataset] // 2
    train_y = np.repeat(np.arange(2 * half), CLASS_COUNTS[cfg.data.dataset][0])
    known, agnostic = splits[: cfg.clients.count], splits[cfg.clients.count :]
    assert len(agnostic) == joiners(cfg)
    assert all(train_y[s.train].max() < half for s in known)
    assert all(train_y[s.train].min() >= half for s in agnostic)


def representatives() -> list[Path]:
    """One config per dataset."""
    chosen: dict[str, Path] = {}
    for path in PATHS:
        chosen.setdefault(load(path).data.dataset, path)
    return [chosen[d] for d in sorted(chosen)]


def test_every_dataset_has_a_representative():
    assert sorted(load(p).data.dataset for p in representatives()) == sorted(NUM_CLASSES)


@pytest.mark.parametrize("path", representatives(), ids=lambda p: p.stem)
def test_algorithm_builds_and_predicts_on_cpu(path: Path):
    algo, _ = predicts_on_cpu(load(path))
    assert algo.shared_state() == {}  # everything travels by ring lap
    assert algo.laps(0) == ("signatures", "learngene") and algo.laps(1) == ("learngene",)
    # The gamma floor keeps the smallest tensors worth about the paper's ~9.04 MB Initia.
    sizes = sorted(p.numel() for p in algo.params.values())
    floor_mib = 4 * sum(sizes[: algo.gamma_min]) / 2**20
    assert algo.gamma == len(sizes) == 62 and algo.gamma_min == 57
    assert 8.5 < floor_mib < 9.5
