"""Fixtures the method tests share: one torch thread, small clients of the Fashion-MNIST sample."""

from __future__ import annotations

import pytest
import torch

from tests.helpers.fashion_mnist_clients import Clients, fashion_mnist_clients


@pytest.fixture
def one_thread():
    """One torch thread, as a client on one CPU runs: the two cores are shared by many."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def fmnist_triples() -> Clients:
    """Three clients of real Fashion-MNIST with overlapping class triples: chance is 1/3."""
    return fashion_mnist_clients([((i, i + 1, i + 2), 40) for i in range(3)], 50)


@pytest.fixture(scope="module")
def fmnist_sizes() -> Clients:
    """Three clients of real Fashion-MNIST, classes 0-2 in three sizes: chance is 1/3."""
    return fashion_mnist_clients([((0, 1, 2), n) for n in (15, 30, 45)], 50)
