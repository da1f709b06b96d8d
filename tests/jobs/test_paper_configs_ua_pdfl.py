"""The UA-PDFL paper-reproduction configs: valid, at the paper's settings, covering every cell.

Fast and Ray-free: configs are loaded and validated, partitions are drawn on synthetic labels
with each dataset's real class counts, and UA-PDFL is built at the paper scale on the CPU.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from ring_actors.algorithms.ua_pdfl import CLASSIFIER, FEATURE, UNIT, UNIT_FEATURE
from ring_actors.config import Config, load_config
from tests.jobs.paper_cells import (
    NUM_CLASSES,
    PAPER_DIR,
    drawn_partition,
    paper_configs,
    predicts_on_cpu,
)

PATHS, IDS = paper_configs("ua-pdfl-*.yaml")

BETAS = {0.5, 5.0}
TABLES = {0.5: "Table 1", 5.0: "Table 2"}


def load(path: Path) -> Config:
    return load_config(path)


@pytest.fixture(scope="module")
def configs() -> dict[str, Config]:
    return {p.stem: load(p) for p in PATHS}


def test_paper_configs_exist():
    assert len(PATHS) == 6, f"expected the six UA-PDFL configs in {PAPER_DIR}"


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_config_loads_with_paper_settings(path: Path):
    cfg = load(path)
    opts = cfg.algorithm.options
    assert cfg.algorithm.name == "ua_pdfl"
    assert cfg.experiment.rounds == 150
    assert cfg.experiment.seed == 0
    assert cfg.clients.count == 30
    assert cfg.clients.batch_size == 50
    assert cfg.clients.local_epochs == 1  # not reported: the notes' choice
    assert (opts.optimizer, opts.backbone) == ("sgd", "cnn")
    assert math.isclose(opts.lr, 0.05) and math.isclose(opts.momentum, 0.5)
    assert math.isclose(opts.lr_decay, 0.95) and opts.weight_decay == 0
    assert math.isclose(opts.threshold, 0.1) and math.isclose(opts.mu, 0.01)
    assert opts.divergence == "sym_kl"
    top = cfg.topology
    assert (top.kind, top.degree, top.resample_every) == ("dynamic", 5, 1)
    assert cfg.schedule.mode == "sync"
    assert cfg.data.partition.kind == "dirichlet" and cfg.data.partition.min_size == 10
    assert cfg.data.max_train_per_client is None
    assert cfg.data.root is None and cfg.data.download
    assert cfg.tracking.uri is None
    assert cfg.faults == ()


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_all_clients_share_one_gpu(path: Path):
    clients = load(path).clients
    assert clients.num_gpus > 0 and clients.count * clients.num_gpus <= 1.0 + 1e-9
    assert clients.count * clients.num_cpus <= 16  # fits a 16-core GPU node


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_header_names_the_paper_table_and_its_result(path: Path):
    cfg = load(path)
    lines = path.read_text().splitlines()
    assert lines[0].startswith("# ")
    header = "\n".join(line for line in lines if line.startswith("#"))
    assert TABLES[cfg.data.partition.beta] in header
    assert "Local-T" in header and "±" in header
    assert f"configs/paper/{path.name}" in header  # how to run it


def test_experiment_names_are_unique(configs):
    names = [cfg.experiment.name for cfg in configs.values()]
    assert len(names) == len(set(names))


def test_main_tables_are_covered(configs):
    cells = {(cfg.data.dataset, cfg.data.partition.beta) for cfg in configs.values()}
    assert cells == {(d, b) for d in NUM_CLASSES for b in BETAS}


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_partition_can_be_drawn(path: Path):
    """The partition fits the dataset's real class counts (synthetic labels, no download)."""
    drawn_partition(load(path))


def representatives() -> list[Path]:
    """One config per dataset."""
    chosen: dict[str, Path] = {}
    for path in PATHS:
        chosen.setdefault(load(path).data.dataset, path)
    return [chosen[d] for d in sorted(chosen)]


@pytest.mark.parametrize("path", representatives(), ids=lambda p: p.stem)
def test_algorithm_builds_and_predicts_on_cpu(path: Path):
    cfg = load(path)
    classes = NUM_CLASSES[cfg.data.dataset]
    algo, logits = predicts_on_cpu(cfg)
    assert set(logits) == {"acc"}
    # Phase one is tiny next to the model: a class distribution and one feature vector.
    offer = algo.offer()
    assert offer[UNIT].shape == (classes,)
    assert offer[UNIT_FEATURE].numel() * 100 < sum(v.numel() for v in algo.shared_state().values())
    # Every shared tensor belongs to exactly one part; the convolutions are the feature part.
    shared = algo.shared_state()
    feature, classifier = algo.keys(FEATURE), algo.keys(CLASSIFIER)
    assert len(feature) == 4 and set(feature) | set(classifier) == set(shared)
