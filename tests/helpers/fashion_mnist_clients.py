"""Small clients of the Fashion-MNIST sample shipped in the repository, each with the
classes a test picks: what the method tests learn on."""

from __future__ import annotations

import numpy as np

from ring_actors.data.images import LabelledImages
from ring_actors.data.sources import load_dataset
from tests.conftest import SAMPLE

Clients = list[tuple[LabelledImages, LabelledImages]]  # (train, test) per client


def fashion_mnist_clients(plan: list[tuple[tuple[int, ...], int]], test_per_class: int) -> Clients:
    """One client per ``(classes, train_per_class)`` of ``plan``, each tested on its classes."""
    d = load_dataset(SAMPLE, download=False)

    def take(x: np.ndarray, y: np.ndarray, classes: tuple[int, ...], n: int) -> LabelledImages:
        idx = np.concatenate([np.flatnonzero(y == c)[:n] for c in classes])
        return LabelledImages.from_arrays(x[idx], y[idx], d.mean, d.std)

    return [
        (take(d.train_x, d.train_y, classes, n), take(d.test_x, d.test_y, classes, test_per_class))
        for classes, n in plan
    ]
