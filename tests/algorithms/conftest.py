"""Fixtures the method tests share: one torch thread, small clients of the Fashion-MNIST sample."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ring_actors.data.images import LabelledImages
from ring_actors.data.sources import load_dataset
from tests.conftest import SAMPLE

Clients = list[tuple[LabelledImages, LabelledImages]]  # (train, test) per client


@pytest.fixture
def one_thread():
    """One torch thread, as a client on one CPU runs: the two cores are shared by many."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


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


@pytest.fixture(scope="module")
def fmnist_triples() -> Clients:
    """Three clients of real Fashion-MNIST with overlapping class triples: chance is 1/3."""
    return fashion_mnist_clients([((i, i + 1, i + 2), 40) for i in range(3)], 50)


@pytest.fixture(scope="module")
def fmnist_sizes() -> Clients:
    """Three clients of real Fashion-MNIST, classes 0-2 in three sizes: chance is 1/3."""
    return fashion_mnist_clients([((0, 1, 2), n) for n in (15, 30, 45)], 50)
