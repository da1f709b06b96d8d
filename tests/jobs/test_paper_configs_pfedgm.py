"""The pFedGM paper-reproduction configs: valid, at the paper's settings, covering every cell.

Fast and Ray-free: configs are loaded and validated, partitions are drawn on synthetic labels
with each dataset's real class counts, and pFedGM is built at the paper scale on the CPU.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from ring_actors.config import Config, load_config
from tests.jobs.paper_cells import drawn_partition, paper_configs, predicts_on_cpu

PATHS, IDS = paper_configs("pfedgm-*.yaml")

DATASETS = ("cifar10", "cifar100")
# (clients, local epochs) of Table 1 (standard) and Table 4 (moderate).
TABLES = {"Table 1": (100, 5), "Table 4": (20, 2)}
# pFedGM's reported accuracy per (table, dataset, beta).
REPORTED = {
    ("Table 1", "cifar10", 0.1): "91.00",
    ("Table 1", "cifar10", 0.5): "77.49",
    ("Table 1", "cifar100", 0.1): "57.56",
    ("Table 1", "cifar100", 0.5): "42.25",
    ("Table 4", "cifar10", 0.1): "92.48",
    ("Table 4", "cifar10", 0.5): "80.93",
    ("Table 4", "cifar100", 0.1): "63.79",
    ("Table 4", "cifar100", 0.5): "51.04",
}
# Values the generator, navigator and precisions hold: what each sampled client sends.
MODEL_SIZE = {"cifar10": 106_400 + 1_290 + 1_280, "cifar100": 106_400 + 12_900 + 12_800}


def load(path: Path) -> Config:
    return load_config(path)


def table(path: Path) -> str:
    """The table a config's header names."""
    found = re.findall(r"Table [14]\b", path.read_text().splitlines()[1])
    assert len(found) == 1, path.name
    return found[0]


def cell(path: Path) -> tuple[str, str, float]:
    cfg = load(path)
    return table(path), cfg.data.dataset, cfg.data.partition.beta


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_config_loads_with_paper_settings(path: Path):
    cfg = load(path)
    opts = cfg.algorithm.options
    clients, epochs = TABLES[table(path)]
    assert cfg.algorithm.name == "pfedgm"
    assert (cfg.experiment.rounds, cfg.experiment.seed) == (200, 0)
    assert (cfg.clients.count, cfg.clients.local_epochs) == (clients, epochs)
    assert cfg.clients.batch_size == 50
    assert opts.backbone == "fedpac_cnn" and opts.optimizer == "sgd"
    assert (opts.lr, opts.momentum, opts.weight_decay) == (0.01, 0.5, 5e-4)
    assert math.isclose(opts.participation, 0.3) and opts.lam == 1.0
    assert opts.phase2_sgd and opts.phase2_lbfgs
    assert (opts.phase2_epochs, opts.phase2_lr, opts.phase2_momentum) == (5, 0.05, 0.5)
    assert opts.phase2_weight_decay == 5e-4
    assert (opts.lbfgs_lr, opts.lbfgs_iters, opts.lbfgs_steps) == (0.05, 10, 5)
    assert cfg.data.dataset in DATASETS
    assert cfg.data.partition.kind == "dirichlet"
    assert cfg.data.partition.beta in (0.1, 0.5)
    assert cfg.data.max_train_per_client is None
    assert cfg.data.root is None and cfg.data.download
    assert cfg.topology.kind == "ring"
    assert cfg.schedule.mode == "sync"
    assert cfg.eval.every == 10 and cfg.experiment.rounds % cfg.eval.every == 0
    assert cfg.tracking.uri is None
    assert cfg.faults == ()


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_all_clients_share_one_gpu(path: Path):
    clients = load(path).clients
    assert clients.num_gpus > 0 and clients.count * clients.num_gpus <= 1.0 + 1e-9
    assert clients.count * clients.num_cpus <= 16  # fits a 16-core GPU node


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_header_names_the_table_and_the_reported_accuracy(path: Path):
    lines = path.read_text().splitlines()
    assert lines[0].startswith("# ")
    header = "\n".join(line for line in lines if line.startswith("#"))
    assert REPORTED[cell(path)] in header
    assert f"--config jobs/configs/paper/{path.name}" in header


def test_every_cell_has_exactly_one_config():
    assert sorted(cell(p) for p in PATHS) == sorted(REPORTED)
    names = [load(p).experiment.name for p in PATHS]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_partition_can_be_drawn(path: Path):
    """The partition fits the dataset's real class counts (synthetic labels, no download)."""
    cfg = load(path)
    splits = drawn_partition(cfg)
    # At least a few batches per client: the paper's minimum is 50 training samples.
    assert min(len(s.train) for s in splits) >= cfg.data.partition.min_size >= 30


def representatives() -> list[Path]:
    """One Table 1 config per dataset."""
    chosen: dict[str, Path] = {}
    for path in PATHS:
        if table(path) == "Table 1":
            chosen.setdefault(load(path).data.dataset, path)
    return [chosen[d] for d in sorted(chosen)]


def test_every_dataset_has_a_representative():
    assert sorted(load(p).data.dataset for p in representatives()) == sorted(DATASETS)


@pytest.mark.parametrize("path", representatives(), ids=lambda p: p.stem)
def test_algorithm_builds_and_predicts_on_cpu(path: Path):
    cfg = load(path)
    algo, logits = predicts_on_cpu(cfg)
    assert {"acc", "acc_global", "acc_navigator"} <= set(logits)  # each checked finite
    # The lap carries the paper's model: 108,970 values for CIFAR-10, 132,100 for CIFAR-100.
    handed = sum(t.numel() for t in algo.hand_off_state().values())
    assert handed == MODEL_SIZE[cfg.data.dataset]
