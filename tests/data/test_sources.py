"""Dataset loading from the real offline copies and from small fakes in standard formats."""

from __future__ import annotations

import gzip
import io
import os
import pickle
import tarfile
import time
from pathlib import Path

import numpy as np
import pytest

from ring_actors.data import sources
from ring_actors.data.sources import (
    DATASETS,
    DatasetArrays,
    DatasetUnavailable,
    load_dataset,
    resolve_root,
)

REAL_ROOT = os.environ.get("RING_ACTORS_DATA")
needs_real_data = pytest.mark.skipif(
    not REAL_ROOT,
    reason="RING_ACTORS_DATA is unset; point it at the offline datasets (e.g. ../shared/datasets)",
)


@pytest.fixture(autouse=True)
def session_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    """Keep .npz caches in one folder per test session, away from the user's cache."""
    monkeypatch.setenv("RING_ACTORS_CACHE", str(tmp_path_factory.getbasetemp() / "ra-cache"))


def _check_arrays(d: DatasetArrays, n_train: int, n_test: int, shape: tuple[int, int, int]):
    assert d.train_x.shape == (n_train, *shape) and d.test_x.shape == (n_test, *shape)
    assert d.train_y.shape == (n_train,) and d.test_y.shape == (n_test,)
    for x in (d.train_x, d.test_x):
        assert x.dtype == np.uint8 and x.flags.c_contiguous
    for y in (d.train_y, d.test_y):
        assert y.dtype == np.int64
        assert y.min() >= 0 and y.max() < d.num_classes
    assert d.input_shape == shape
    assert len(d.mean) == len(d.std) == shape[0]


@needs_real_data
@pytest.mark.parametrize(
    ("name", "mean", "std"),
    [("mnist", (0.1307,), (0.3081,)), ("fashion-mnist", (0.2860,), (0.3530,))],
)
def test_real_idx_datasets(name: str, mean: tuple[float], std: tuple[float]):
    d = load_dataset(name, REAL_ROOT, download=False)
    _check_arrays(d, 60000, 10000, (1, 28, 28))
    assert d.name == name and d.num_classes == 10
    assert (d.mean, d.std) == (mean, std)
    assert set(np.unique(d.train_y)) == set(range(10)) == set(np.unique(d.test_y))
    assert abs(d.train_x.sum(dtype=np.uint64) / (d.train_x.size * 255) - mean[0]) < 1e-3
    if name == "fashion-mnist":
        assert (np.bincount(d.train_y) == 6000).all() and (np.bincount(d.test_y) == 1000).all()


@pytest.fixture(scope="module")
def cifar10_twice(tmp_path_factory: pytest.TempPathFactory):
    """CIFAR-10 loaded into a fresh cache, then again from it, with the cache's files (and
    their modification times) after each load."""
    if not REAL_ROOT:
        pytest.skip("RING_ACTORS_DATA is unset; point it at the offline datasets")
    cache = tmp_path_factory.mktemp("cifar10-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RING_ACTORS_CACHE", str(cache))
        first = load_dataset("cifar10", REAL_ROOT, download=False)
        after_first = _written(cache)
        second = load_dataset("cifar10", REAL_ROOT, download=False)
    return cache, first, after_first, second, _written(cache)


def _written(cache: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in (cache / "extracted").iterdir()}


@pytest.mark.slow
def test_real_cifar10(cifar10_twice):
    _, d, *_ = cifar10_twice
    _check_arrays(d, 50000, 10000, (3, 32, 32))
    assert d.num_classes == 10
    assert (np.bincount(d.train_y) == 5000).all() and (np.bincount(d.test_y) == 1000).all()
    assert d.mean == (0.4914, 0.4822, 0.4465) and d.std == (0.2470, 0.2435, 0.2616)
    per_channel = d.train_x.sum(axis=(0, 2, 3), dtype=np.uint64) / (50000 * 32 * 32 * 255)
    np.testing.assert_allclose(per_channel, d.mean, atol=1e-3)


@pytest.mark.slow
def test_the_second_load_reads_the_npz_cache_and_gets_the_same_arrays(cifar10_twice):
    """Read, not rebuilt: its files are not written again (how much faster that is, a
    timing on a loaded machine cannot tell)."""
    cache, first, after_first, second, after_second = cifar10_twice
    assert after_second == after_first  # read, not written again
    for key in ("train_x", "train_y", "test_x", "test_y"):
        assert np.array_equal(getattr(first, key), getattr(second, key)), key
    assert [p.name.startswith("cifar10-") for p in (cache / "extracted").iterdir()] == [True]


def test_missing_dataset_names_expected_files(tmp_path: Path):
    with pytest.raises(DatasetUnavailable) as err:
        load_dataset("mnist", tmp_path, download=False)
    message = str(err.value)
    assert isinstance(err.value, FileNotFoundError)
    for needle in (
        "train-images-idx3-ubyte",
        "t10k-labels-idx1-ubyte.gz",
        str(tmp_path / "mnist"),
        str(tmp_path / "MNIST" / "raw"),
        "RING_ACTORS_DATA",
        "download",
    ):
        assert needle in message


def test_failed_download_raises_unavailable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    def offline(name: str, root: Path) -> None:
        raise OSError("network is unreachable")

    monkeypatch.setattr(sources, "_download", offline)
    with pytest.raises(DatasetUnavailable, match="network is unreachable") as err:
        load_dataset("cifar10", tmp_path)
    assert "cifar-10-batches-py" in str(err.value)


def test_unknown_dataset():
    with pytest.raises(ValueError, match="unknown dataset 'imagenet'") as err:
        load_dataset("imagenet", download=False)
    assert all(name in str(err.value) for name in DATASETS)


def test_resolve_root_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("RING_ACTORS_DATA", str(tmp_path / "env"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert resolve_root(tmp_path / "explicit") == tmp_path / "explicit"
    assert resolve_root(None) == tmp_path / "env"
    monkeypatch.delenv("RING_ACTORS_DATA")
    assert resolve_root(None) == tmp_path / "xdg" / "ring-actors" / "data"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert resolve_root(None) == Path.home() / ".cache" / "ring-actors" / "data"


# ---------------------------------------------------------------- small fakes


def _write_idx(path: Path, array: np.ndarray) -> None:
    header = bytes([0, 0, 0x08, array.ndim]) + np.array(array.shape, dtype=">u4").tobytes()
    path.write_bytes(header + array.astype(np.uint8).tobytes())


def test_torchvision_mnist_layout_uncompressed(tmp_path: Path):
    rng = np.random.default_rng(0)
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    images = {
        s: rng.integers(0, 256, (n, 28, 28), dtype=np.uint8) for s, n in (("train", 7), ("t10k", 3))
    }
    labels = {s: rng.integers(0, 10, len(images[s])) for s in images}
    for split in images:
        _write_idx(raw / f"{split}-images-idx3-ubyte", images[split])
        _write_idx(raw / f"{split}-labels-idx1-ubyte", labels[split])
    d = load_dataset("mnist", tmp_path, download=False)
    _check_arrays(d, 7, 3, (1, 28, 28))
    np.testing.assert_array_equal(d.train_x[:, 0], images["train"])
    np.testing.assert_array_equal(d.test_y, labels["t10k"])


def _cifar100_batches(rng: np.random.Generator) -> dict[str, dict]:
    return {
        split: {
            b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
            b"fine_labels": rng.integers(0, 100, n).tolist(),
            b"coarse_labels": rng.integers(0, 20, n).tolist(),
        }
        for split, n in (("train", 12), ("test", 5))
    }


def _check_cifar100(d: DatasetArrays, batches: dict[str, dict]) -> None:
    _check_arrays(d, 12, 5, (3, 32, 32))
    assert d.num_classes == 100
    np.testing.assert_array_equal(d.train_x, batches["train"][b"data"].reshape(12, 3, 32, 32))
    np.testing.assert_array_equal(d.train_y, batches["train"][b"fine_labels"])
    np.testing.assert_array_equal(d.test_y, batches["test"][b"fine_labels"])


def test_cifar100_pickle_folder(tmp_path: Path):
    batches = _cifar100_batches(np.random.default_rng(1))
    folder = tmp_path / "cifar-100-python"
    folder.mkdir()
    for split, batch in batches.items():
        (folder / split).write_bytes(pickle.dumps(batch))
    _check_cifar100(load_dataset("cifar100", tmp_path, download=False), batches)


def test_cifar100_archive_in_project_folder(tmp_path: Path):
    batches = _cifar100_batches(np.random.default_rng(2))
    (tmp_path / "cifar-100").mkdir()
    with tarfile.open(tmp_path / "cifar-100" / "cifar-100-python.tar.gz", "w:gz") as tar:
        for split, batch in batches.items():
            blob = pickle.dumps(batch)
            info = tarfile.TarInfo(f"cifar-100-python/{split}")
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
    _check_cifar100(load_dataset("cifar100", tmp_path, download=False), batches)


def _write_svhn(folder: Path, rng: np.random.Generator) -> dict[str, dict]:
    from scipy.io import savemat

    folder.mkdir(parents=True, exist_ok=True)
    mats = {}
    for split, n in (("train", 9), ("test", 4)):
        mats[split] = {
            "X": rng.integers(0, 256, (32, 32, 3, n), dtype=np.uint8),
            "y": np.array([[10], [1], [9], [10], [3], [4], [5], [6], [7]][:n], dtype=np.uint8),
        }
        savemat(folder / f"{split}_32x32.mat", mats[split])
    return mats


def test_svhn_mat_files(tmp_path: Path):
    mats = _write_svhn(tmp_path / "svhn", np.random.default_rng(3))
    d = load_dataset("svhn", tmp_path, download=False)
    _check_arrays(d, 9, 4, (3, 32, 32))
    assert d.train_y.tolist() == [0, 1, 9, 0, 3, 4, 5, 6, 7]
    x = mats["train"]["X"]
    assert d.train_x[5, 2, 7, 11] == x[7, 11, 2, 5]
    np.testing.assert_array_equal(d.test_x, np.transpose(mats["test"]["X"], (3, 2, 0, 1)))


def test_download_then_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    calls = []

    def fake_download(name: str, root: Path) -> None:
        calls.append((name, root))
        _write_svhn(root, np.random.default_rng(4))  # torchvision keeps SVHN in the root

    monkeypatch.setattr(sources, "_download", fake_download)
    d = load_dataset("svhn", tmp_path / "fresh")
    assert calls == [("svhn", tmp_path / "fresh")] and len(d.train_y) == 9


def test_corrupt_cache_is_rebuilt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    cache_dir = tmp_path / "cache"
    monkeypatch.setenv("RING_ACTORS_CACHE", str(cache_dir))
    _write_svhn(tmp_path, np.random.default_rng(5))
    first = load_dataset("svhn", tmp_path, download=False)
    (cached,) = (cache_dir / "extracted").glob("svhn-*.npz")
    cached.write_bytes(b"not a zip")
    with pytest.warns(UserWarning, match="unreadable dataset cache"):
        again = load_dataset("svhn", tmp_path, download=False)
    np.testing.assert_array_equal(first.train_x, again.train_x)
    assert load_dataset("svhn", tmp_path, download=False).train_x.shape == (9, 3, 32, 32)


def test_changed_source_file_invalidates_cache(tmp_path: Path):
    rng = np.random.default_rng(6)
    _write_svhn(tmp_path, rng)
    first = load_dataset("svhn", tmp_path, download=False)
    mats = _write_svhn(tmp_path, rng)
    stamp = time.time() + 5
    for split in ("train", "test"):
        os.utime(tmp_path / f"{split}_32x32.mat", (stamp, stamp))
    again = load_dataset("svhn", tmp_path, download=False)
    assert not np.array_equal(first.train_x, again.train_x)
    np.testing.assert_array_equal(again.test_x, np.transpose(mats["test"]["X"], (3, 2, 0, 1)))


def test_gzip_idx_roundtrip(tmp_path: Path):
    """The project layout with .gz files, as in the shared datasets folder."""
    rng = np.random.default_rng(7)
    folder = tmp_path / "fashion-mnist"
    folder.mkdir()
    arrays = {
        "train-images-idx3-ubyte": rng.integers(0, 256, (4, 28, 28), dtype=np.uint8),
        "train-labels-idx1-ubyte": np.arange(4, dtype=np.uint8),
        "t10k-images-idx3-ubyte": rng.integers(0, 256, (2, 28, 28), dtype=np.uint8),
        "t10k-labels-idx1-ubyte": np.array([9, 0], dtype=np.uint8),
    }
    for name, array in arrays.items():
        _write_idx(tmp_path / name, array)
        (folder / f"{name}.gz").write_bytes(gzip.compress((tmp_path / name).read_bytes()))
    d = load_dataset("fashion-mnist", tmp_path, download=False)
    _check_arrays(d, 4, 2, (1, 28, 28))
    assert d.test_y.tolist() == [9, 0]
    np.testing.assert_array_equal(d.test_x[:, 0], arrays["t10k-images-idx3-ubyte"])
