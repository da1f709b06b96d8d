"""A labelled image set kept on one device and served in batches without a DataLoader."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class LabelledImages:
    """uint8 images (N, C, H, W) and int64 labels on one device.

    Images stay uint8 (4x smaller than float) and are normalised per batch on the device,
    which is cheaper than holding a float copy per actor.
    """

    x: torch.Tensor
    y: torch.Tensor
    mean: torch.Tensor
    std: torch.Tensor

    @classmethod
    def from_arrays(
        cls,
        x: np.ndarray,
        y: np.ndarray,
        mean: tuple[float, ...],
        std: tuple[float, ...],
        device: torch.device | str = "cpu",
    ) -> LabelledImages:
        """Tensors on ``device`` from numpy arrays (shared, not copied, when already on the CPU).

        Arrays read from Ray's object store are read-only and shared by every process of the
        node; the tensors are only ever read, so they keep sharing them.
        """
        channels = x.shape[1]
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            images = torch.as_tensor(np.ascontiguousarray(x), device=device)
            labels = torch.as_tensor(np.asarray(y, dtype=np.int64), device=device)
        return cls(
            x=images,
            y=labels,
            mean=torch.tensor(mean, dtype=torch.float32, device=device).view(1, channels, 1, 1),
            std=torch.tensor(std, dtype=torch.float32, device=device).view(1, channels, 1, 1),
        )

    def __len__(self) -> int:
        return int(self.y.shape[0])

    @property
    def device(self) -> torch.device:
        return self.x.device

    def normalise(self, x: torch.Tensor) -> torch.Tensor:
        return (x.float() / 255.0 - self.mean) / self.std

    def batches(
        self,
        batch_size: int,
        shuffle: bool = True,
        generator: torch.Generator | None = None,
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Normalised float batches; a shuffled pass uses an on-device permutation."""
        n = len(self)
        if shuffle:
            order = torch.randperm(n, generator=generator, device="cpu").to(self.device)
        else:
            order = None
        for start in range(0, n, batch_size):
            if order is None:
                xb, yb = self.x[start : start + batch_size], self.y[start : start + batch_size]
            else:
                idx = order[start : start + batch_size]
                xb, yb = self.x[idx], self.y[idx]
            yield self.normalise(xb), yb

    def class_counts(self, num_classes: int) -> torch.Tensor:
        return torch.bincount(self.y, minlength=num_classes)
