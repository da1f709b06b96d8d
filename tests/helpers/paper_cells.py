"""What the paper-config tests share: where the configs are, the real datasets' class counts,
the runtime's own partition drawn on labels alone, and one prediction on the CPU."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from ring_actors.algorithms import Algorithm
from ring_actors.client.method_factory import build_algorithm
from ring_actors.config import Config
from ring_actors.data.client_splits import split_for
from ring_actors.data.partition import ClientSplit
from ring_actors.data.sources import DatasetArrays

PAPER_DIR = Path(__file__).resolve().parents[2] / "jobs" / "configs" / "paper"
# Per-class train/test counts of the standard splits (SVHN: torchvision's cropped digits).
CLASS_COUNTS = {
    "svhn": (
        [4948, 13861, 10585, 8497, 7458, 6882, 5727, 5595, 5045, 4659],
        [1744, 5099, 4149, 2882, 2523, 2384, 1977, 2019, 1660, 1595],
    ),
    "cifar10": ([5000] * 10, [1000] * 10),
    "cifar100": ([500] * 100, [100] * 100),
}
NUM_CLASSES = {name: len(train) for name, (train, _) in CLASS_COUNTS.items()}


def paper_configs(pattern: str) -> tuple[list[Path], list[str]]:
    """The paper configs matching ``pattern`` and their test ids."""
    paths = sorted(PAPER_DIR.glob(pattern))
    return paths, [p.stem for p in paths]


def drawn_partition(cfg: Config) -> list[ClientSplit]:
    """Every client's split as a launch draws it, on labels with the dataset's real class
    counts (no images, no download); asserts each client has data to train and test on."""
    train_counts, test_counts = CLASS_COUNTS[cfg.data.dataset]
    train_y = np.repeat(np.arange(len(train_counts)), train_counts)
    test_y = np.repeat(np.arange(len(test_counts)), test_counts)
    no_images = np.zeros((0, 1, 1, 1), np.uint8)
    labels = DatasetArrays(
        cfg.data.dataset, no_images, train_y, no_images, test_y, len(train_counts), (0.0,), (1.0,)
    )
    splits = split_for(cfg, labels)
    assert len(splits) == cfg.total_clients
    assert min(len(s.train) for s in splits) >= max(1, cfg.data.partition.min_size)
    assert all(len(s.test) > 0 for s in splits)
    return splits


def predicts_on_cpu(cfg: Config) -> tuple[Algorithm, dict[str, torch.Tensor]]:
    """Client 0's method built from ``cfg`` and its finite logits for two 3x32x32 images."""
    classes = NUM_CLASSES[cfg.data.dataset]
    algo = build_algorithm(cfg, 0, classes, (3, 32, 32), torch.device("cpu"))
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    logits = algo.predict(x)
    assert "acc" in logits
    for name, value in logits.items():
        assert value.shape == (2, classes), name
        assert torch.isfinite(value).all(), name
    return algo, logits
