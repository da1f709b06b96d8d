"""The datasets' standard distribution formats (idx, CIFAR pickles, SVHN .mat) read into
uint8 arrays: train images, train labels, test images, test labels."""

from __future__ import annotations

import gzip
import pickle
import tarfile
from collections.abc import Sequence
from pathlib import Path
from typing import IO

import numpy as np

Splits = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def read_idx(path: Path) -> np.ndarray:
    """An idx file (optionally gzip'd): big-endian header magic (0, 0, dtype, ndim), then dims."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 0x08:
        raise ValueError(f"{path} is not a uint8 idx file")
    ndim = data[3]
    dims = tuple(int(d) for d in np.frombuffer(data, dtype=">u4", count=ndim, offset=4))
    offset = 4 + 4 * ndim
    if len(data) - offset != int(np.prod(dims)):
        raise ValueError(f"{path}: header says {dims} but holds {len(data) - offset} bytes")
    return np.frombuffer(data, dtype=np.uint8, offset=offset).reshape(dims)


def read_idx_set(paths: list[Path]) -> Splits:
    train_x, train_y, test_x, test_y = (read_idx(p) for p in paths)
    return train_x[:, None], train_y, test_x[:, None], test_y


def cifar_arrays(batches: Sequence[dict], label_key: bytes) -> tuple[np.ndarray, np.ndarray]:
    x = np.concatenate([np.asarray(b[b"data"], dtype=np.uint8) for b in batches])
    y = np.concatenate([np.asarray(b[label_key]) for b in batches])
    return x.reshape(-1, 3, 32, 32), y


def load_pickle(f: IO[bytes]) -> dict:
    return pickle.load(f, encoding="bytes")


def read_cifar_dir(paths: list[Path], label_key: bytes) -> Splits:
    """CIFAR pickles; the last path is the test batch, the others train batches in order."""
    batches = []
    for p in paths:
        with open(p, "rb") as f:
            batches.append(load_pickle(f))
    return (*cifar_arrays(batches[:-1], label_key), *cifar_arrays(batches[-1:], label_key))


def read_cifar_archive(
    paths: list[Path], folder: str, train: tuple[str, ...], test: str, label_key: bytes
) -> Splits:
    """CIFAR pickles streamed from a .tar.gz/.tar.xz without extracting it to disk."""
    wanted = {f"{folder}/{name}" for name in (*train, test)}
    found: dict[str, dict] = {}
    with tarfile.open(paths[0], "r:*") as tar:
        for member in tar:
            if member.isfile() and member.name in wanted:
                found[member.name] = load_pickle(tar.extractfile(member))
    missing = sorted(wanted - found.keys())
    if missing:
        raise ValueError(f"{paths[0]} lacks {', '.join(missing)}")
    return (
        *cifar_arrays([found[f"{folder}/{n}"] for n in train], label_key),
        *cifar_arrays([found[f"{folder}/{test}"]], label_key),
    )


def read_svhn(paths: list[Path]) -> Splits:
    """SVHN .mat files: X is (32, 32, 3, N), y is (N, 1) with label 10 for digit 0."""
    from scipy.io import loadmat  # scipy is needed for SVHN only

    out = []
    for p in paths:
        mat = loadmat(p)
        x = np.ascontiguousarray(np.transpose(mat["X"], (3, 2, 0, 1)), dtype=np.uint8)
        y = np.asarray(mat["y"]).reshape(-1).astype(np.int64)
        out += [x, np.where(y == 10, 0, y)]
    return tuple(out)


# ---------------------------------------------------------------- layouts
