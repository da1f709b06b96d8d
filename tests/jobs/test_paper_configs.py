"""The paper-reproduction configs: each loads at its paper's settings, fits one GPU node, names
its table and result, can be partitioned, and its method builds at the paper scale on the CPU;
together they cover every cell the papers report.

Fast and Ray-free: configs are loaded and validated, partitions are drawn on synthetic labels
with each dataset's real class counts, and methods are built on the CPU.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from ring_actors.algorithms.ua_pdfl import CLASSIFIER, FEATURE, UNIT, UNIT_FEATURE
from ring_actors.config import Config, FaultSection, load_config
from tests.helpers.paper_cells import CLASS_COUNTS, NUM_CLASSES, PAPER_DIR, drawn_partition
from tests.helpers.paper_cells import predicts_on_cpu as predicts

RESNET18 = 11_173_962  # parameters of the CIFAR ResNet-18 with 10 classes
# DRDFL's Table 2 rows, and its Local (Table 3) with the papers' plain SGD
BASELINES = ("fedrep", "fedbn", "fednova", "dfedpgp", "dispfl", "local")
# GENE-FL (dataset, partition, s or beta): Table I/II Comm (GB) and Acc, Table III/IV Acc.
GENE_FL = {
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
# pFedGM: (clients, local epochs) per table, and the reported accuracy per (table, data, beta).
PFEDGM_TABLES = {"Table 1": (100, 5), "Table 4": (20, 2)}
PFEDGM = {
    ("Table 1", "cifar10", 0.1): "91.00",
    ("Table 1", "cifar10", 0.5): "77.49",
    ("Table 1", "cifar100", 0.1): "57.56",
    ("Table 1", "cifar100", 0.5): "42.25",
    ("Table 4", "cifar10", 0.1): "92.48",
    ("Table 4", "cifar10", 0.5): "80.93",
    ("Table 4", "cifar100", 0.1): "63.79",
    ("Table 4", "cifar100", 0.5): "51.04",
}
# Values pFedGM's generator, navigator and precisions hold: what each sampled client sends.
PFEDGM_MODEL = {"cifar10": 106_400 + 1_290 + 1_280, "cifar100": 106_400 + 12_900 + 12_800}
UA_PDFL_TABLES = {0.5: "Table 1", 5.0: "Table 2"}


def cell(cfg: Config) -> tuple[str, str, float]:
    """(dataset, partition kind, beta or classes per client) of a config."""
    part = cfg.data.partition
    value = part.beta if part.kind == "dirichlet" else part.classes_per_client
    return cfg.data.dataset, part.kind, value


def pfedgm_table(path: Path) -> str:
    """The table a pFedGM config's header names."""
    found = re.findall(r"Table [14]\b", path.read_text().splitlines()[1])
    assert len(found) == 1, path.name
    return found[0]


def header(path: Path) -> str:
    lines = path.read_text().splitlines()
    assert lines[0].startswith("# ")
    return "\n".join(line for line in lines if line.startswith("#"))


# ---- each paper's settings, the words its headers hold, and what its method sends ----------


def drdfl_settings(cfg: Config, path: Path) -> None:
    opts = cfg.algorithm.options
    assert cfg.clients.count in (20, 50)
    assert (cfg.clients.local_epochs, cfg.clients.batch_size) == (5, 64)
    assert opts.backbone == "resnet18" and math.isclose(opts.lr, 1e-3)
    assert math.isclose(opts.alpha, 0.99) and math.isclose(opts.noise_var, 0.15)
    assert opts.merge == "average"  # the notes' choice for synchronous rounds
    assert cfg.eval.global_max_samples is None
    assert cfg.data.dataset in NUM_CLASSES
    assert cfg.data.partition.kind in ("dirichlet", "shard")


def drdfl_header(cfg: Config, path: Path) -> list[str]:
    return ["Local-T", "Global-T", "Table" if "Table" in header(path) else "Fig."]


def drdfl_builds(cfg: Config) -> None:
    algo, _ = predicts(cfg)
    # The message is about the papers' 0.58 M values (Learngene plus the class Gaussians).
    assert 0.55e6 < sum(t.numel() for t in algo.shared_state().values()) < 0.62e6


def baseline_settings(cfg: Config, path: Path) -> None:
    drdfl = load_config(PAPER_DIR / path.name.replace(cfg.algorithm.name, "drdfl", 1))
    assert cfg.algorithm.options.backbone == "resnet18"
    assert math.isclose(cfg.algorithm.options.lr, 1e-3)  # the papers' one learning rate
    same = ("data", "clients", "topology", "schedule", "eval", "faults", "tracking")
    assert all(getattr(cfg, key) == getattr(drdfl, key) for key in same)


def baseline_header(cfg: Config, path: Path) -> list[str]:
    table = "Table 3" if cfg.algorithm.name == "local" else "Table 2"
    return [f"reproduces 000 {table}", "Local-T", "Global-T", f"jobs/configs/paper/{path.name}"]


def baseline_builds(cfg: Config) -> None:
    torch.set_num_threads(1)  # as a client on one CPU runs: the two cores are shared by many
    algo, _ = predicts(cfg)
    pushed = sum(t.numel() for t in algo.shared_state().values())
    if algo.laps(0):  # CFL baselines: nothing pushed, the model goes round in the lap
        assert pushed == 0
        lapped = sum(t.numel() for t in algo.hand_off_state().values())  # the lap's keys
        assert 0.99 * RESNET18 < lapped <= RESNET18 + 10_000  # within BatchNorm and the head
    elif cfg.algorithm.name == "local":
        assert pushed == 0
    elif cfg.algorithm.name == "dfedpgp":
        assert pushed == pytest.approx(RESNET18 - 5130, rel=1e-3)  # all but the head
    else:  # DisPFL: about half the weights and a bit each for the masks
        values = sum(t.numel() for k, t in algo.shared_state().items() if "#mask" not in k)
        assert 0.45 * RESNET18 < values < 0.6 * RESNET18


def gene_fl_settings(cfg: Config, path: Path) -> None:
    opts = cfg.algorithm.options
    assert cfg.clients.count == 50 and cfg.total_clients == 100
    assert cfg.faults == (FaultSection(at_round=100, join=50),)  # then 50 agnostic rounds
    assert cfg.data.partition.joiner_classes == "other_half"
    assert (cfg.clients.local_epochs, cfg.clients.batch_size) == (10, 64)
    assert (opts.backbone, opts.optimizer) == ("resnet18", "sgd")
    assert math.isclose(opts.lr, 0.01) and math.isclose(opts.momentum, 0.9)
    assert math.isclose(opts.lambda1, 0.5) and math.isclose(opts.lambda2, 0.05)
    assert math.isclose(opts.epsilon, 0.5) and (opts.clusters, opts.svd_rank) == (4, 5)
    assert math.isclose(opts.participation, 0.2)  # 10 of 50 per round
    assert opts.known_rounds == 100
    assert opts.weighting == "count"  # Eq. 10 is a uniform mean
    assert cell(cfg) in GENE_FL


def gene_fl_header(cfg: Config, path: Path) -> list[str]:
    known, agnostic = (
        ("Table I", "Table III") if cfg.data.partition.kind == "shard" else ("Table II", "Table IV")
    )
    return [f"{known} ", f"{agnostic} ", "Comm", "Acc", "Initia", *GENE_FL[cell(cfg)]]


def gene_fl_builds(cfg: Config) -> None:
    algo, _ = predicts(cfg)
    assert algo.shared_state() == {}  # everything travels by ring lap
    assert algo.laps(0) == ("signatures", "learngene") and algo.laps(1) == ("learngene",)
    # The gamma floor keeps the smallest tensors worth about the paper's ~9.04 MB Initia.
    sizes = sorted(p.numel() for p in algo.params.values())
    floor_mib = 4 * sum(sizes[: algo.gamma_min]) / 2**20
    assert algo.gamma == len(sizes) == 62 and algo.gamma_min == 57
    assert 8.5 < floor_mib < 9.5


def pfedgm_settings(cfg: Config, path: Path) -> None:
    opts = cfg.algorithm.options
    clients, epochs = PFEDGM_TABLES[pfedgm_table(path)]
    assert (cfg.clients.count, cfg.clients.local_epochs, cfg.clients.batch_size) == (
        clients,
        epochs,
        50,
    )
    assert opts.backbone == "fedpac_cnn" and opts.optimizer == "sgd"
    assert (opts.lr, opts.momentum, opts.weight_decay) == (0.01, 0.5, 5e-4)
    assert math.isclose(opts.participation, 0.3) and opts.lam == 1.0
    assert opts.phase2_sgd and opts.phase2_lbfgs
    assert (opts.phase2_epochs, opts.phase2_lr, opts.phase2_momentum) == (5, 0.05, 0.5)
    assert opts.phase2_weight_decay == 5e-4
    assert (opts.lbfgs_lr, opts.lbfgs_iters, opts.lbfgs_steps) == (0.05, 10, 5)
    assert cfg.data.partition.kind == "dirichlet" and cfg.data.partition.beta in (0.1, 0.5)
    assert cfg.eval.every == 10 and cfg.experiment.rounds % cfg.eval.every == 0
    # At least a few batches per client: the paper's minimum is 50 training samples.
    assert cfg.data.partition.min_size >= 30


def pfedgm_header(cfg: Config, path: Path) -> list[str]:
    reported = PFEDGM[(pfedgm_table(path), cfg.data.dataset, cfg.data.partition.beta)]
    return [reported, f"--config jobs/configs/paper/{path.name}"]


def pfedgm_builds(cfg: Config) -> None:
    algo, logits = predicts(cfg)
    assert {"acc", "acc_global", "acc_navigator"} <= set(logits)  # each checked finite
    # The lap carries the paper's model: 108,970 values for CIFAR-10, 132,100 for CIFAR-100.
    handed = sum(t.numel() for t in algo.hand_off_state().values())
    assert handed == PFEDGM_MODEL[cfg.data.dataset]


def ua_pdfl_settings(cfg: Config, path: Path) -> None:
    opts = cfg.algorithm.options
    assert (cfg.clients.count, cfg.clients.batch_size) == (30, 50)
    assert cfg.clients.local_epochs == 1  # not reported: the notes' choice
    assert (opts.optimizer, opts.backbone) == ("sgd", "cnn")
    assert math.isclose(opts.lr, 0.05) and math.isclose(opts.momentum, 0.5)
    assert math.isclose(opts.lr_decay, 0.95) and opts.weight_decay == 0
    assert math.isclose(opts.threshold, 0.1) and math.isclose(opts.mu, 0.01)
    assert opts.divergence == "sym_kl"
    top = cfg.topology
    assert (top.kind, top.degree, top.resample_every) == ("dynamic", 5, 1)
    assert cfg.data.partition.kind == "dirichlet" and cfg.data.partition.min_size == 10


def ua_pdfl_header(cfg: Config, path: Path) -> list[str]:
    table = UA_PDFL_TABLES[cfg.data.partition.beta]
    return [table, "Local-T", "±", f"configs/paper/{path.name}"]


def ua_pdfl_builds(cfg: Config) -> None:
    classes = NUM_CLASSES[cfg.data.dataset]
    algo, logits = predicts(cfg)
    assert set(logits) == {"acc"}
    # Phase one is tiny next to the model: a class distribution and one feature vector.
    offer, shared = algo.offer(), algo.shared_state()
    assert offer[UNIT].shape == (classes,)
    assert offer[UNIT_FEATURE].numel() * 100 < sum(v.numel() for v in shared.values())
    # Every shared tensor belongs to exactly one part; the convolutions are the feature part.
    feature, classifier = algo.keys(FEATURE), algo.keys(CLASSIFIER)
    assert len(feature) == 4 and set(feature) | set(classifier) == set(shared)


@dataclass(frozen=True)
class Paper:
    """One paper's configs: how many, its run length and what each check expects."""

    prefixes: tuple[str, ...]
    count: int
    rounds: int
    settings: Callable[[Config, Path], None]
    header_terms: Callable[[Config, Path], list[str]]
    builds: Callable[[Config], None]
    representative: Callable[[Config, Path], bool] = lambda cfg, path: True
    eval_every: int | None = 1  # None: checked by the paper's settings


PAPERS = {
    "drdfl": Paper(
        ("drdfl",),
        17,
        300,
        drdfl_settings,
        drdfl_header,
        drdfl_builds,
        lambda cfg, path: cfg.clients.count == 20 and "-no-" not in path.stem,
    ),
    "baselines": Paper(BASELINES, 6, 300, baseline_settings, baseline_header, baseline_builds),
    "gene_fl": Paper(("gene-fl",), 12, 150, gene_fl_settings, gene_fl_header, gene_fl_builds),
    "pfedgm": Paper(
        ("pfedgm",),
        8,
        200,
        pfedgm_settings,
        pfedgm_header,
        pfedgm_builds,
        lambda cfg, path: pfedgm_table(path) == "Table 1",
        eval_every=None,
    ),
    "ua_pdfl": Paper(
        ("ua-pdfl",), 6, 150, ua_pdfl_settings, ua_pdfl_header, ua_pdfl_builds, eval_every=None
    ),
}


def _prefix(path: Path) -> str:
    return re.split(r"-(?:cifar|svhn)", path.stem)[0]


PATHS = sorted(PAPER_DIR.glob("*.yaml"))
BY_PAPER = {
    name: [p for p in PATHS if _prefix(p) in paper.prefixes] for name, paper in PAPERS.items()
}
CASES = [(name, path) for name, paths in BY_PAPER.items() for path in paths]
IDS = [path.stem for _, path in CASES]
_CONFIGS: dict[Path, Config] = {}


def load(path: Path) -> Config:
    """Each config is read once for the whole module."""
    if path not in _CONFIGS:
        _CONFIGS[path] = load_config(path)
    return _CONFIGS[path]


def representatives() -> list[tuple[str, Path]]:
    """One config per paper and dataset, the paper's main setting where it has others."""
    chosen: dict[tuple[str, str], Path] = {}
    for name, path in CASES:
        cfg = load(path)
        if PAPERS[name].representative(cfg, path):
            chosen.setdefault((name, cfg.data.dataset), path)
    return [(name, path) for (name, _), path in sorted(chosen.items())]


def test_every_config_belongs_to_a_paper_and_each_has_all_its_configs():
    assert sorted(path for _, path in CASES) == PATHS
    assert {name: len(paths) for name, paths in BY_PAPER.items()} == {
        name: paper.count for name, paper in PAPERS.items()
    }


@pytest.mark.parametrize(("paper", "path"), CASES, ids=IDS)
def test_config_loads_with_its_papers_settings(paper: str, path: Path):
    cfg = load(path)
    spec = PAPERS[paper]
    assert cfg.algorithm.name == _prefix(path).replace("-", "_")
    assert (cfg.experiment.rounds, cfg.experiment.seed) == (spec.rounds, 0)
    assert (cfg.schedule.mode, cfg.tracking.uri) == ("sync", None)
    assert cfg.data.max_train_per_client is None
    assert cfg.data.root is None and cfg.data.download
    if spec.eval_every is not None:
        assert cfg.eval.every == spec.eval_every
    if paper != "gene_fl":
        assert cfg.faults == ()
    if paper != "ua_pdfl":
        assert cfg.topology.kind == "ring"
    spec.settings(cfg, path)


@pytest.mark.parametrize(("paper", "path"), CASES, ids=IDS)
def test_every_client_fits_one_gpu_node(paper: str, path: Path):
    cfg = load(path)
    clients, everyone = cfg.clients, cfg.total_clients  # joiners included
    assert clients.num_gpus > 0 and everyone * clients.num_gpus <= 1.0 + 1e-9
    assert everyone * clients.num_cpus <= 16 + 1e-9  # a 16-core GPU node


@pytest.mark.parametrize(("paper", "path"), CASES, ids=IDS)
def test_header_names_the_papers_table_and_result(paper: str, path: Path):
    text = header(path)
    for term in PAPERS[paper].header_terms(load(path), path):
        assert term in text, term


@pytest.mark.parametrize("paper", list(PAPERS))
def test_experiment_names_are_unique_within_a_paper(paper: str):
    names = [load(path).experiment.name for path in BY_PAPER[paper]]
    assert len(names) == len(set(names))


@pytest.mark.parametrize(("paper", "path"), CASES, ids=IDS)
def test_partition_can_be_drawn(paper: str, path: Path):
    """The partition fits the dataset's real class counts (synthetic labels, no download)."""
    drawn_partition(load(path))


@pytest.mark.parametrize("path", BY_PAPER["gene_fl"], ids=lambda p: p.stem)
def test_gene_fl_populations_hold_the_two_halves_of_the_classes(path: Path):
    """Known clients on the lower half of the classes, joiners on the upper half."""
    cfg = load(path)
    splits = drawn_partition(cfg)
    half = NUM_CLASSES[cfg.data.dataset] // 2
    train_y = np.repeat(np.arange(2 * half), CLASS_COUNTS[cfg.data.dataset][0])
    known, agnostic = splits[: cfg.clients.count], splits[cfg.clients.count :]
    assert len(agnostic) == cfg.total_clients - cfg.clients.count
    assert all(train_y[s.train].max() < half for s in known)
    assert all(train_y[s.train].min() >= half for s in agnostic)


def test_every_paper_has_a_representative_per_dataset():
    found: dict[str, set[str]] = {}
    for name, path in representatives():
        found.setdefault(name, set()).add(load(path).data.dataset)
    assert found == {
        "drdfl": set(NUM_CLASSES),
        "baselines": {"cifar10"},
        "gene_fl": set(NUM_CLASSES),
        "pfedgm": {"cifar10", "cifar100"},
        "ua_pdfl": set(NUM_CLASSES),
    }


@pytest.mark.parametrize(("paper", "path"), representatives(), ids=lambda case: str(case))
def test_method_builds_at_paper_scale_and_sends_what_the_paper_counts(paper: str, path: Path):
    before = torch.get_num_threads()
    try:
        PAPERS[paper].builds(load(path))
    finally:
        torch.set_num_threads(before)


# ---- what each paper's tables cover --------------------------------------------------------


def test_drdfl_main_tables_ablations_and_the_fifty_client_run_are_covered():
    configs = {p.stem: load(p) for p in BY_PAPER["drdfl"]}
    main = {cell(c) for c in configs.values() if c.clients.count == 20}
    shards = {"svhn": {4, 5}, "cifar10": {4, 5}, "cifar100": {20, 30}}
    for dataset, values in shards.items():
        assert {(dataset, "dirichlet", b) for b in (0.1, 0.4)} <= main, dataset
        assert {(dataset, "shard", s) for s in values} <= main, dataset
    found = set()
    for stem, cfg in configs.items():
        opts = cfg.algorithm.options
        off = {"pr": not opts.use_pr, "gl": not opts.use_gl}
        assert sum(off.values()) == (1 if "-no-" in stem else 0), stem
        found |= {(*cell(cfg), loss) for loss, dropped in off.items() if dropped}
    for loss in ("pr", "gl"):  # 000 Table 5 / 004 Table III: CIFAR-10, s = 4 and beta = 0.1
        assert {("cifar10", "shard", 4, loss), ("cifar10", "dirichlet", 0.1, loss)} <= found
    big = [cell(c) for c in configs.values() if c.clients.count == 50]
    assert big == [("cifar10", "shard", 4)]


def test_baselines_follow_the_papers_options():
    options: dict[str, Any] = {_prefix(p): load(p).algorithm.options for p in BY_PAPER["baselines"]}
    assert (options["fedrep"].head_epochs, options["fedrep"].body_epochs) == (1, 4)
    assert (options["fednova"].optimizer, options["fednova"].momentum) == ("sgd", 0.9)
    assert (options["dispfl"].density, options["dispfl"].anneal_rounds) == (0.5, 300)
    # 000's Local "only performs SGD": plain SGD at the papers' one rate
    assert (options["local"].optimizer, options["local"].momentum) == ("sgd", 0.0)


def test_gene_fl_and_pfedgm_tables_are_covered_once_each():
    assert sorted(cell(load(p)) for p in BY_PAPER["gene_fl"]) == sorted(GENE_FL)
    pfedgm = [
        (pfedgm_table(p), load(p).data.dataset, load(p).data.partition.beta)
        for p in BY_PAPER["pfedgm"]
    ]
    assert sorted(pfedgm) == sorted(PFEDGM)


def test_ua_pdfl_main_tables_are_covered():
    cells = {(load(p).data.dataset, load(p).data.partition.beta) for p in BY_PAPER["ua_pdfl"]}
    assert cells == {(d, b) for d in NUM_CLASSES for b in UA_PDFL_TABLES}
