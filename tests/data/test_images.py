"""LabelledImages: conversion, batching, normalisation and counting."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch

from ring_actors.data.images import LabelledImages


def indexed(n: int = 50, shape=(1, 2, 2), classes: int = 5) -> LabelledImages:
    """Image i is filled with the pixel value i, so a batch reveals which samples it holds."""
    x = np.broadcast_to(np.arange(n, dtype=np.uint8).reshape(n, 1, 1, 1), (n, *shape))
    y = np.arange(n) % classes
    return LabelledImages.from_arrays(x, y, (0.0,) * shape[0], (1.0,) * shape[0])


def sample_ids(xb: torch.Tensor) -> list[int]:
    return torch.round(xb[:, 0, 0, 0] * 255).long().tolist()


def test_from_arrays_dtypes_shapes_and_device():
    x = np.zeros((6, 3, 4, 4), dtype=np.uint8)
    y = np.array([0, 1, 2, 0, 1, 2], dtype=np.int32)
    data = LabelledImages.from_arrays(x, y, (0.1, 0.2, 0.3), (0.5, 0.5, 0.5), device="cpu")
    assert data.x.dtype == torch.uint8 and data.x.shape == (6, 3, 4, 4)
    assert data.y.dtype == torch.int64
    assert data.mean.dtype == torch.float32 and data.mean.shape == (1, 3, 1, 1)
    assert data.std.shape == (1, 3, 1, 1)
    torch.testing.assert_close(data.mean.flatten(), torch.tensor([0.1, 0.2, 0.3]))
    assert data.device == torch.device("cpu")
    assert len(data) == 6


def test_from_arrays_accepts_non_contiguous_views_and_copies():
    base = np.arange(2 * 4 * 4, dtype=np.uint8).reshape(2, 1, 4, 4)
    view = base[:, :, ::-1, :]  # negative strides
    data = LabelledImages.from_arrays(view, np.array([0, 1]), (0.0,), (1.0,))
    assert np.array_equal(data.x.numpy(), view)


@pytest.mark.parametrize("batch_size", [7, 16, 50, 64])
def test_shuffled_batches_cover_every_sample_exactly_once(batch_size):
    data = indexed()
    ids, labels, sizes = [], [], []
    for xb, yb in data.batches(
        batch_size, shuffle=True, generator=torch.Generator().manual_seed(0)
    ):
        assert xb.dtype == torch.float32
        ids += sample_ids(xb)
        labels += yb.tolist()
        sizes.append(len(yb))
    assert sorted(ids) == list(range(50))
    assert Counter(labels) == Counter((np.arange(50) % 5).tolist())
    assert all(label == i % 5 for i, label in zip(ids, labels, strict=True))  # pairs intact
    assert all(s == batch_size for s in sizes[:-1]) and sum(sizes) == 50
    if batch_size < 50:
        assert ids != list(range(50))  # actually shuffled


def test_unshuffled_batches_are_in_order():
    data = indexed()
    batches = list(data.batches(16, shuffle=False))
    assert [len(yb) for _, yb in batches] == [16, 16, 16, 2]
    ids = [i for xb, _ in batches for i in sample_ids(xb)]
    assert ids == list(range(50))
    assert torch.equal(torch.cat([yb for _, yb in batches]), data.y)


def test_normalisation_is_exact_for_known_pixels():
    x = np.array([[[[0, 255], [51, 102]]], [[[255, 0], [0, 0]]]], dtype=np.uint8)
    data = LabelledImages.from_arrays(x, np.array([0, 1]), (0.5,), (0.25,))
    xb, _ = next(data.batches(2, shuffle=False))
    assert xb[0, 0, 0, 0].item() == -2.0  # (0 - 0.5) / 0.25
    assert xb[0, 0, 0, 1].item() == 2.0  # (1 - 0.5) / 0.25
    assert xb[0, 0, 1, 0].item() == pytest.approx((0.2 - 0.5) / 0.25)
    assert xb[1, 0, 0, 0].item() == 2.0


def test_normalisation_is_per_channel():
    x = np.full((1, 3, 1, 1), 255, dtype=np.uint8)
    data = LabelledImages.from_arrays(x, np.array([0]), (0.0, 0.5, 1.0), (1.0, 0.5, 2.0))
    out = data.normalise(data.x)
    assert out.flatten().tolist() == [1.0, 1.0, 0.0]


def test_seeded_generator_is_reproducible():
    data = indexed()

    def order(seed: int) -> list[int]:
        g = torch.Generator().manual_seed(seed)
        return [i for xb, _ in data.batches(8, generator=g) for i in sample_ids(xb)]

    assert order(3) == order(3)
    assert order(3) != order(4)
    g = torch.Generator().manual_seed(3)
    first = [i for xb, _ in data.batches(8, generator=g) for i in sample_ids(xb)]
    second = [i for xb, _ in data.batches(8, generator=g) for i in sample_ids(xb)]
    assert first != second  # the generator advances between epochs


def test_class_counts():
    y = np.array([0, 2, 2, 3, 0, 2])
    data = LabelledImages.from_arrays(np.zeros((6, 1, 1, 1), np.uint8), y, (0.0,), (1.0,))
    assert data.class_counts(5).tolist() == [2, 0, 3, 1, 0]
    assert data.class_counts(5).dtype == torch.int64


def test_empty_set_yields_no_batches():
    data = LabelledImages.from_arrays(np.zeros((0, 1, 2, 2), np.uint8), np.zeros(0), (0.0,), (1.0,))
    assert len(data) == 0
    assert list(data.batches(4)) == []
    assert data.class_counts(3).tolist() == [0, 0, 0]
