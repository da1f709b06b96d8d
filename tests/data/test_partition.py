"""Client partitions: coverage, disjointness, label skew and test splits that mirror train."""

from __future__ import annotations

import os

import numpy as np
import pytest

from ring_actors.data.partition import (
    PARTITIONS,
    ClientSplit,
    mirror_test,
    partition_train,
    split_clients,
)
from ring_actors.data.sources import load_dataset

REAL_ROOT = os.environ.get("RING_ACTORS_DATA")


@pytest.fixture(scope="module")
def fmnist(tmp_path_factory: pytest.TempPathFactory) -> tuple[np.ndarray, np.ndarray]:
    """Real Fashion-MNIST train and test labels."""
    if not REAL_ROOT:
        pytest.skip("RING_ACTORS_DATA is unset; point it at the offline datasets")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RING_ACTORS_CACHE", str(tmp_path_factory.mktemp("cache")))
        d = load_dataset("fashion-mnist", REAL_ROOT, download=False)
    return d.train_y, d.test_y


def _assert_disjoint_sorted(parts: list[np.ndarray]) -> np.ndarray:
    """Every part sorted unique int64; no index in two parts. Returns the union."""
    for p in parts:
        assert p.dtype == np.int64 and (np.diff(p) > 0).all()
    union = np.concatenate(parts)
    assert len(np.unique(union)) == len(union), "an index is in two clients"
    return np.sort(union)


def _counts(parts: list[np.ndarray], labels: np.ndarray) -> np.ndarray:
    return np.stack([np.bincount(labels[p], minlength=10) for p in parts])


@pytest.mark.parametrize("kind", PARTITIONS)
def test_disjoint_and_covering(fmnist, kind: str):
    train_y, _ = fmnist
    parts = partition_train(train_y, 10, kind, seed=3)
    assert len(parts) == 10
    union = _assert_disjoint_sorted(parts)
    # shard with 10 clients x 2 classes uses every class twice, so all kinds cover everything
    np.testing.assert_array_equal(union, np.arange(len(train_y)))


@pytest.mark.parametrize("kind", PARTITIONS)
def test_deterministic_per_seed(fmnist, kind: str):
    train_y, _ = fmnist
    a = partition_train(train_y, 7, kind, seed=11)
    b = partition_train(train_y, 7, kind, seed=11)
    c = partition_train(train_y, 7, kind, seed=12)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c, strict=True))


def test_iid_is_balanced(fmnist):
    train_y, _ = fmnist
    parts = partition_train(train_y, 7, "iid")
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1
    expected = len(train_y) / 7 / 10
    assert np.abs(_counts(parts, train_y) - expected).max() < 0.15 * expected


@pytest.mark.parametrize(("clients", "per_client"), [(10, 2), (7, 3), (3, 2), (4, 10)])
def test_shard_classes_per_client(fmnist, clients: int, per_client: int):
    train_y, _ = fmnist
    parts = partition_train(train_y, clients, "shard", classes_per_client=per_client, seed=1)
    held = [set(np.unique(train_y[p]).tolist()) for p in parts]
    assert all(len(h) == per_client for h in held)
    usage = np.bincount([c for h in held for c in h], minlength=10)
    assert usage.max() - usage.min() <= 1, "classes are not shared evenly"
    union = _assert_disjoint_sorted(parts)
    assigned = [c for c in range(10) if usage[c]]
    np.testing.assert_array_equal(union, np.flatnonzero(np.isin(train_y, assigned)))


def test_dirichlet_min_size_and_skew(fmnist):
    train_y, _ = fmnist
    skewed = partition_train(train_y, 20, "dirichlet", beta=0.05, min_size=100, seed=2)
    assert min(len(p) for p in skewed) >= 100
    flat = partition_train(train_y, 20, "dirichlet", beta=100.0, seed=2)

    def dominant_share(parts: list[np.ndarray]) -> float:
        counts = _counts(parts, train_y)
        return float((counts.max(axis=1) / counts.sum(axis=1)).mean())

    assert dominant_share(skewed) > 0.6
    assert dominant_share(flat) < 0.2


def test_dirichlet_infeasible_min_size():
    labels = np.repeat([0, 1], 50)
    with pytest.raises(ValueError, match="exceeds the 100 samples"):
        partition_train(labels, 11, "dirichlet", min_size=10)
    with pytest.raises(ValueError, match="raise beta, lower min_size"):
        partition_train(labels, 10, "dirichlet", beta=0.01, min_size=10)


@pytest.mark.parametrize("kind", PARTITIONS)
def test_test_split_mirrors_train_mix(fmnist, kind: str):
    train_y, test_y = fmnist
    train = partition_train(train_y, 10, kind, beta=0.3, seed=5)
    test = mirror_test(train, train_y, test_y, seed=5)
    union = _assert_disjoint_sorted(test)
    np.testing.assert_array_equal(union, np.arange(len(test_y)))
    # Fashion-MNIST has 6000 train and 1000 test images per class, so a client holding n
    # train images of a class gets n / 6 test images of it, up to rounding.
    assert np.abs(_counts(test, test_y) - _counts(train, train_y) / 6).max() < 1


def test_mirror_drops_classes_nobody_holds(fmnist):
    train_y, test_y = fmnist
    train = partition_train(train_y, 2, "shard", classes_per_client=3, seed=4)
    test = mirror_test(train, train_y, test_y)
    held = np.unique(train_y[np.concatenate(train)])
    assert len(held) == 6
    np.testing.assert_array_equal(
        _assert_disjoint_sorted(test), np.flatnonzero(np.isin(test_y, held))
    )


def test_mirror_largest_remainder():
    train_labels = np.zeros(3, dtype=np.int64)
    test = mirror_test(
        [np.array([0]), np.array([1]), np.array([2])], train_labels, np.zeros(10, np.int64)
    )
    assert sorted(len(t) for t in test) == [3, 3, 4]


def test_split_clients_cap(fmnist):
    train_y, test_y = fmnist
    full = split_clients(train_y, test_y, 8, "dirichlet", beta=0.2, seed=9)
    capped = split_clients(
        train_y, test_y, 8, "dirichlet", beta=0.2, max_train_per_client=400, seed=9
    )
    assert all(isinstance(s, ClientSplit) for s in capped)
    _assert_disjoint_sorted([s.train for s in capped])
    for f, c in zip(full, capped, strict=True):
        assert len(c.train) == min(400, len(f.train))
        assert np.isin(c.train, f.train).all()
        np.testing.assert_array_equal(c.test, f.test)  # test splits still share the full set
        full_mix = np.bincount(train_y[f.train], minlength=10) * len(c.train) / len(f.train)
        assert np.abs(np.bincount(train_y[c.train], minlength=10) - full_mix).max() < 1
    np.testing.assert_array_equal(
        _assert_disjoint_sorted([s.test for s in capped]), np.arange(len(test_y))
    )


def test_validation_errors():
    labels = np.repeat(np.arange(10), 20)
    with pytest.raises(ValueError, match="choose one of iid, dirichlet, shard"):
        partition_train(labels, 4, "pathological")
    for bad in (0, -1, 2.5):
        with pytest.raises(ValueError, match="num_clients must be an integer >= 1"):
            partition_train(labels, bad, "iid")
    with pytest.raises(ValueError, match=r"classes_per_client must be in 1\.\.10"):
        partition_train(labels, 4, "shard", classes_per_client=11)
    with pytest.raises(ValueError, match="beta > 0"):
        partition_train(labels, 4, "dirichlet", beta=0.0)
    with pytest.raises(ValueError, match="1-D integer"):
        partition_train(labels.reshape(20, 10), 4, "iid")
    with pytest.raises(ValueError, match="cannot fill"):
        partition_train(labels[:3], 4, "iid")
    with pytest.raises(ValueError, match="max_train_per_client must be >= 1"):
        split_clients(labels, labels, 4, "iid", max_train_per_client=0)
