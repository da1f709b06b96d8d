"""Load benchmark image datasets as uint8 arrays from local files, so runs work offline.

A dataset of one's own is ``module:load``, a loader returning :class:`DatasetArrays` (its
contract: ``ring_actors.plugins.paths``); what it returns is checked here.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

from ring_actors.data.array_cache import cache_path, read_cache, write_cache
from ring_actors.data.formats import (
    Splits,
    read_cifar_archive,
    read_cifar_dir,
    read_idx_set,
    read_svhn,
)
from ring_actors.plugins.paths import PluginError, is_plugin_path, resolve_dataset

DATASETS = ("mnist", "fashion-mnist", "fashion-mnist-sample", "cifar10", "cifar100", "svhn")

# A few MB of Fashion-MNIST inside the package, so a fresh clone runs offline (its README says
# how it was drawn); read from here whatever the data root.
SAMPLE_DIR = Path(__file__).parent / "fashion_mnist_sample"


class DatasetUnavailable(FileNotFoundError):
    """The dataset's files are not under the data root and could not be downloaded."""


class DatasetError(ValueError):
    """A dataset loader of one's own failed, or returned something that is not a dataset."""


@dataclass(frozen=True, eq=False)
class DatasetArrays:
    """A dataset's train and test splits: uint8 images (N, C, H, W) and int64 labels."""

    name: str
    train_x: np.ndarray
    train_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray
    num_classes: int
    mean: tuple[float, ...]
    std: tuple[float, ...]

    @property
    def input_shape(self) -> tuple[int, int, int]:
        """(C, H, W) of one image."""
        c, h, w = self.train_x.shape[1:]
        return int(c), int(h), int(w)


@dataclass(frozen=True)
class _Layout:
    """One way a dataset's files can lie under the root: all of ``files`` in ``folder``.

    ``folder`` is relative to the root ("" is the root itself), or absolute for files that ship
    with the package.
    """

    folder: str
    files: tuple[str, ...]
    read: Callable[[list[Path]], Splits]

    def paths(self, root: Path) -> list[Path]:
        return [root / self.folder / f for f in self.files]

    def describe(self, root: Path) -> str:
        return f"{root / self.folder}{os.sep}: {', '.join(self.files)}"


@dataclass(frozen=True)
class _Spec:
    num_classes: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    layouts: tuple[_Layout, ...]
    downloadable: bool = True


def _user_cache_dir() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg) if xdg else Path.home() / ".cache"


def _cache_base() -> Path:
    """``$RING_ACTORS_CACHE``, else ``<user cache dir>/ring-actors``."""
    override = os.environ.get("RING_ACTORS_CACHE")
    return Path(override) if override else _user_cache_dir() / "ring-actors"


def resolve_root(root: str | os.PathLike | None) -> Path:
    """The data root: ``root`` if given, else ``$RING_ACTORS_DATA``, else the user cache dir."""
    if root is not None:
        return Path(root).expanduser()
    env = os.environ.get("RING_ACTORS_DATA")
    if env:
        return Path(env).expanduser()
    return _user_cache_dir() / "ring-actors" / "data"


def _idx_layouts(*folders: str) -> tuple[_Layout, ...]:
    """The four idx files, plain or gzip'd, in each of ``folders``."""
    names = (
        "train-images-idx3-ubyte",
        "train-labels-idx1-ubyte",
        "t10k-images-idx3-ubyte",
        "t10k-labels-idx1-ubyte",
    )
    return tuple(
        _Layout(folder, tuple(n + ext for n in names), read_idx_set)
        for folder in folders
        for ext in ("", ".gz")
    )


def _cifar_layouts(
    project: str,
    folder: str,
    archives: tuple[str, ...],
    train: tuple[str, ...],
    test: str,
    label_key: bytes,
) -> tuple[_Layout, ...]:
    """Extracted pickle folder (project or torchvision place), then the archive in either place."""
    read_dir = partial(read_cifar_dir, label_key=label_key)
    read_archive = partial(
        read_cifar_archive, folder=folder, train=train, test=test, label_key=label_key
    )
    return (
        *(_Layout(d, (*train, test), read_dir) for d in (f"{project}/{folder}", folder)),
        *(_Layout(d, (a,), read_archive) for d in (project, "") for a in archives),
    )


_SPECS: dict[str, _Spec] = {
    "mnist": _Spec(10, (0.1307,), (0.3081,), _idx_layouts("mnist", "MNIST/raw")),
    "fashion-mnist": _Spec(
        10, (0.2860,), (0.3530,), _idx_layouts("fashion-mnist", "FashionMNIST/raw")
    ),
    "fashion-mnist-sample": _Spec(
        10,
        (0.2860,),
        (0.3530,),
        _idx_layouts(str(SAMPLE_DIR)),
        downloadable=False,
    ),
    "cifar10": _Spec(
        10,
        (0.4914, 0.4822, 0.4465),
        (0.2470, 0.2435, 0.2616),
        _cifar_layouts(
            "cifar-10",
            "cifar-10-batches-py",
            ("cifar-10-python.tar.xz", "cifar-10-python.tar.gz"),
            tuple(f"data_batch_{i}" for i in range(1, 6)),
            "test_batch",
            b"labels",
        ),
    ),
    "cifar100": _Spec(
        100,
        (0.5071, 0.4865, 0.4409),
        (0.2673, 0.2564, 0.2762),
        _cifar_layouts(
            "cifar-100",
            "cifar-100-python",
            ("cifar-100-python.tar.gz", "cifar-100-python.tar.xz"),
            ("train",),
            "test",
            b"fine_labels",
        ),
    ),
    "svhn": _Spec(
        10,
        (0.4377, 0.4438, 0.4728),
        (0.1980, 0.2010, 0.1970),
        tuple(_Layout(d, ("train_32x32.mat", "test_32x32.mat"), read_svhn) for d in ("svhn", "")),
    ),
}


def _download(name: str, root: Path) -> None:
    """Fetch the standard files into ``root`` with torchvision (needs a network)."""
    from torchvision import datasets

    cls = {
        "mnist": datasets.MNIST,
        "fashion-mnist": datasets.FashionMNIST,
        "cifar10": datasets.CIFAR10,
        "cifar100": datasets.CIFAR100,
        "svhn": datasets.SVHN,
    }[name]
    for train in (True, False):
        if name == "svhn":
            cls(str(root), split="train" if train else "test", download=True)
        else:
            cls(str(root), train=train, download=True)


# ---------------------------------------------------------------- public loader


def _checked(name: str, spec: _Spec, arrays: Splits) -> Splits:
    """Writable C-contiguous uint8 images and int64 labels, with sizes and labels checked."""
    out: list[np.ndarray] = []
    for x, y in (arrays[:2], arrays[2:]):
        x = np.require(x, np.uint8, ["C", "W"])
        y = np.require(y, np.int64, ["C", "W"]).reshape(-1)
        if x.ndim != 4 or x.shape[0] != y.shape[0]:
            raise ValueError(f"{name}: {x.shape[0]} images of shape {x.shape} vs {len(y)} labels")
        if y.size and (y.min() < 0 or y.max() >= spec.num_classes):
            raise ValueError(f"{name}: labels outside 0..{spec.num_classes - 1}")
        out += [x, y]
    return tuple(out)


def _find(spec: _Spec, root: Path) -> tuple[_Layout, list[Path]] | None:
    for layout in spec.layouts:
        paths = layout.paths(root)
        if all(p.is_file() for p in paths):
            return layout, paths
    return None


def _unavailable(name: str, spec: _Spec, root: Path, reason: str) -> DatasetUnavailable:
    expected = "\n".join(f"  - {layout.describe(root)}" for layout in spec.layouts)
    return DatasetUnavailable(
        f"dataset {name!r} not found under data root {root} ({reason}). "
        f"Expected all files of one of these layouts:\n{expected}\n"
        "Fix: set data.root or the RING_ACTORS_DATA environment variable to a folder holding "
        "these files, or run with download allowed on a machine with network access."
    )


def dataset_facts(
    name: str, root: str | os.PathLike | None = None, download: bool = True
) -> dict[str, object]:
    """What a run needs to know of ``name`` before loading it: classes, image shape, and
    where its files are (or would be downloaded to).

    A loader of one's own is the only source of its facts, so it is run (``download`` is
    passed on to it).
    """
    if is_plugin_path(name):
        dataset = load_dataset(name, root, download)
        return {
            "num_classes": dataset.num_classes,
            "input_shape": dataset.input_shape,
            "present": True,
            "where": str(resolve_root(root)),
        }
    spec = _SPECS[name]
    data_root = resolve_root(root)
    found = _find(spec, data_root)
    channels = len(spec.mean)
    return {
        "num_classes": spec.num_classes,
        "input_shape": (channels, 28, 28) if channels == 1 else (channels, 32, 32),
        "present": found is not None,
        "where": str(found[1][0].parent if found else data_root),
    }


def load_dataset(
    name: str, root: str | os.PathLike | None = None, download: bool = True
) -> DatasetArrays:
    """Load ``name``'s train and test splits from the data root (see :func:`resolve_root`).

    Decoded arrays are cached as .npz under ``$RING_ACTORS_CACHE/extracted`` (default
    ``<user cache dir>/ring-actors/extracted``), never inside the possibly read-only root.
    Missing files are downloaded through torchvision when ``download`` is True. A
    ``module:load`` name is a loader of one's own, called as ``load(root, download)``.
    """
    if is_plugin_path(name):
        return _load_plugin(name, resolve_root(root), download)
    if name not in _SPECS:
        raise ValueError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")
    spec = _SPECS[name]
    data_root = resolve_root(root)
    found = _find(spec, data_root)
    if found is None:
        if not spec.downloadable:
            raise DatasetUnavailable(
                f"dataset {name!r}: its files are missing from {SAMPLE_DIR}; reinstall the "
                "package (pip install -e .) from a complete checkout"
            )
        if not download:
            raise _unavailable(name, spec, data_root, "download=False")
        try:
            _download(name, data_root)
        except Exception as e:  # no network, read-only root, checksum mismatch, ...
            raise _unavailable(
                name, spec, data_root, f"download failed: {type(e).__name__}: {e}"
            ) from e
        found = _find(spec, data_root)
        if found is None:
            raise _unavailable(name, spec, data_root, "download gave no usable files")
    layout, paths = found

    cache = cache_path(_cache_base(), name, paths)
    arrays = read_cache(cache)
    if arrays is None:
        arrays = _checked(name, spec, layout.read(paths))
        write_cache(cache, arrays)
    train_x, train_y, test_x, test_y = arrays
    return DatasetArrays(
        name, train_x, train_y, test_x, test_y, spec.num_classes, spec.mean, spec.std
    )


# ---------------------------------------------------------------- a loader of one's own


def _load_plugin(path: str, root: Path, download: bool) -> DatasetArrays:
    """Run the user's loader; any failure is a DatasetError naming ``data.dataset``."""
    try:
        load = resolve_dataset(path)
    except PluginError as err:
        raise DatasetError(f"data.dataset: {err}") from err
    try:
        dataset = load(root, download)
    except Exception as err:  # the user's loader may fail in any way
        raise DatasetError(f"data.dataset: {path!r} failed: {type(err).__name__}: {err}") from err
    problem = _plugin_problem(dataset)
    if problem:
        raise DatasetError(f"data.dataset: {path!r} returned {problem}")
    return dataset


def _plugin_problem(dataset: object) -> str | None:
    """What is wrong with a loader's result, or None: the clients and methods take it as is."""
    if not isinstance(dataset, DatasetArrays):
        return f"a {type(dataset).__name__}, not a ring_actors.data.sources.DatasetArrays"
    classes = dataset.num_classes
    if not isinstance(classes, int) or isinstance(classes, bool) or classes < 2:
        return f"num_classes={classes!r}: must be an int >= 2"
    shapes = set()
    for split in ("train", "test"):
        x, y = getattr(dataset, f"{split}_x"), getattr(dataset, f"{split}_y")
        if not (isinstance(x, np.ndarray) and x.dtype == np.uint8 and x.ndim == 4 and len(x)):
            return f"{split}_x {_array_text(x)}: must be uint8 images (N, C, H, W), N >= 1"
        if not (isinstance(y, np.ndarray) and y.dtype == np.int64 and y.shape == (len(x),)):
            return f"{split}_y {_array_text(y)}: must be int64 labels ({len(x)},), one per image"
        if y.min() < 0 or y.max() >= classes:
            return f"{split}_y: labels in {y.min()}..{y.max()}, outside 0..{classes - 1}"
        shapes.add(x.shape[1:])
    if len(shapes) > 1:
        return f"train and test images of different shapes {sorted(shapes)}"
    channels = dataset.train_x.shape[1]
    if not len(dataset.mean) == len(dataset.std) == channels:
        return f"mean {dataset.mean} and std {dataset.std}: must have one value per channel"
    if not all(s > 0 for s in dataset.std):
        return f"std {dataset.std}: every value must be > 0"
    return None


def _array_text(value: object) -> str:
    if isinstance(value, np.ndarray):
        return f"of dtype {value.dtype} and shape {value.shape}"
    return f"a {type(value).__name__}"
