"""The baselines' paper configs: each loads, keeps the DRDFL cell's setting, and builds.

Ray-free: configs are loaded and validated, and each method is built at the paper scale
(ResNet-18, CIFAR-10) on the CPU.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ring_actors.config import Config, load_config
from ring_actors.method_factory import build_algorithm

PAPER_DIR = Path(__file__).resolve().parents[2] / "jobs" / "configs" / "paper"
CELL = PAPER_DIR / "drdfl-cifar10-dir0.1.yaml"
BASELINES = ("fedrep", "fedbn", "fednova", "dfedpgp", "dispfl")
PATHS = [PAPER_DIR / f"{name}-cifar10-dir0.1.yaml" for name in BASELINES]
IDS = [p.stem for p in PATHS]
RESNET18 = 11_173_962  # parameters of the CIFAR ResNet-18 with 10 classes


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread, as a client on one CPU runs: the two cores are shared by many."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def cell() -> Config:
    return load_config(CELL)


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_config_is_the_drdfl_cell_with_its_own_method(path: Path, cell: Config):
    cfg = load_config(path)
    assert cfg.algorithm.name == path.stem.split("-")[0]
    assert cfg.algorithm.options.backbone == "resnet18"
    assert cfg.algorithm.options.lr == pytest.approx(1e-3)  # the papers' one learning rate
    assert (cfg.data, cfg.clients, cfg.topology, cfg.schedule, cfg.eval, cfg.faults) == (
        cell.data,
        cell.clients,
        cell.topology,
        cell.schedule,
        cell.eval,
        cell.faults,
    )
    assert (cfg.experiment.rounds, cfg.experiment.seed) == (300, 0)
    assert cfg.tracking == cell.tracking  # one MLflow experiment: one table with DRDFL


def test_experiment_names_are_unique(cell: Config):
    names = [load_config(p).experiment.name for p in PATHS] + [cell.experiment.name]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_header_names_the_row_and_its_results(path: Path):
    lines = path.read_text().splitlines()
    assert "reproduces 000 Table 2" in lines[0]
    header = "\n".join(line for line in lines if line.startswith("#"))
    assert "Local-T" in header and "Global-T" in header
    assert f"jobs/configs/paper/{path.name}" in header  # the command that runs it


def test_method_options_follow_the_papers():
    options = {
        name: load_config(p).algorithm.options for name, p in zip(BASELINES, PATHS, strict=True)
    }
    assert (options["fedrep"].head_epochs, options["fedrep"].body_epochs) == (1, 4)
    assert (options["fednova"].optimizer, options["fednova"].momentum) == ("sgd", 0.9)
    assert options["dispfl"].density == 0.5
    assert options["dispfl"].anneal_rounds == 300


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_method_builds_at_paper_scale_and_sends_what_the_papers_count(path: Path):
    cfg = load_config(path)
    algo = build_algorithm(cfg, 0, 10, (3, 32, 32), torch.device("cpu"))
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    logits = algo.predict(x)["acc"]
    assert logits.shape == (2, 10) and torch.isfinite(logits).all()
    pushed = sum(t.numel() for t in algo.shared_state().values())
    if algo.laps(0):  # CFL baselines: nothing pushed, the model goes round in the lap
        assert pushed == 0
        lapped = sum(t.numel() for t in algo.hand_off_state().values())  # the lap's keys
        assert 0.99 * RESNET18 < lapped <= RESNET18 + 10_000  # within BatchNorm and the head
    elif cfg.algorithm.name == "dfedpgp":
        assert pushed == pytest.approx(RESNET18 - 5130, rel=1e-3)  # all but the head
    else:  # DisPFL: about half the weights and a bit each for the masks
        values = sum(t.numel() for k, t in algo.shared_state().items() if "#mask" not in k)
        assert 0.45 * RESNET18 < values < 0.6 * RESNET18
