"""A backbone and a dataset of your own, in one file:

    python -m jobs.train data.dataset=examples.stripes:load_stripes \\
        algorithm.name=dfedavg algorithm.backbone=examples.stripes:TinyCNN

``TinyCNN`` keeps the backbone contract every method relies on: it is built as
``TinyCNN(input_shape, num_classes)``; ``body`` is an ``nn.Sequential`` holding an
``nn.Flatten`` that maps images to ``feature_dim`` features; ``head`` is the final classifier;
``forward`` is ``head(body(x))``.

``load_stripes(root, download)`` returns a ``DatasetArrays``: uint8 images (N, C, H, W),
int64 labels, the class count and per-channel mean and std. Its images are synthetic (each
class lights up its own horizontal band), so it needs no files and no network.

Both are checked before they are used: their names when the config is loaded, the dataset's
arrays when the driver loads them, the backbone's parts whenever it is built (at config load
when the dataset is a built-in one, else at launch once the data is loaded, and by
``--dry-run``). On a cluster the workers build the backbone, so they need this module too:
``ray.py_modules=[examples]``; the dataset is loaded by the driver alone.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

from ring_actors.data.sources import DatasetArrays

CLASSES = 4
SHAPE = (1, 28, 28)


class TinyCNN(nn.Module):
    """conv3x3(8) -> pool -> fc(32) | fc(num_classes): a few seconds of CPU per round."""

    def __init__(self, input_shape: tuple[int, int, int], num_classes: int) -> None:
        super().__init__()
        channels, height, width = input_shape
        self.feature_dim = 32
        self.body = nn.Sequential(
            nn.Conv2d(channels, 8, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(8 * (height // 2) * (width // 2), self.feature_dim),
            nn.ReLU(),
        )
        self.head = nn.Linear(self.feature_dim, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def load_stripes(root: Path, download: bool) -> DatasetArrays:
    """800 training and 200 test images, the same on every call (``root``, ``download``:
    unused, as nothing is read or fetched)."""
    rng = np.random.default_rng(0)
    train_x, train_y = _stripes(800, rng)
    test_x, test_y = _stripes(200, rng)
    mean = float(train_x.mean() / 255)
    std = float(train_x.std() / 255)
    return DatasetArrays("stripes", train_x, train_y, test_x, test_y, CLASSES, (mean,), (std,))


def _stripes(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Noise, plus a bright band whose row range is the class."""
    y = np.arange(n, dtype=np.int64) % CLASSES
    x = rng.integers(0, 60, size=(n, *SHAPE), dtype=np.uint8)
    band = SHAPE[1] // CLASSES
    for k in range(CLASSES):
        x[y == k, :, k * band : (k + 1) * band] += 180
    return x, y
