"""Draw the Fashion-MNIST sample shipped in this folder from the official idx files.

    python -m ring_actors.data.fashion_mnist_sample.make_sample ../shared/datasets/fashion-mnist

A seeded, class-balanced draw without replacement: ``--train`` images per class from the
official training set and ``--test`` per class from the official test set, kept in their
original order, written as gzip'd idx files under the official names (so the loader reads them
like the full set). Running it again on the same files writes the same bytes.
"""

from __future__ import annotations

import argparse
import gzip
import struct
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
NAMES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}


def read_idx(path: Path) -> np.ndarray:
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = struct.unpack(f">{ndim}I", data[4 : 4 + 4 * ndim])
    return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def write_idx(path: Path, array: np.ndarray) -> None:
    """uint8 idx, gzip'd with a fixed mtime so the bytes depend only on the array."""
    header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:
        f.write(header + np.ascontiguousarray(array).tobytes())


def draw(labels: np.ndarray, per_class: int, rng: np.random.Generator) -> np.ndarray:
    """``per_class`` indices of every class, drawn without replacement, in original order."""
    picks = [
        rng.choice(np.flatnonzero(labels == c), size=per_class, replace=False)
        for c in np.unique(labels)
    ]
    return np.sort(np.concatenate(picks))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="folder of the official gzip'd idx files")
    parser.add_argument("--train", type=int, default=500, help="training images per class")
    parser.add_argument("--test", type=int, default=100, help="test images per class")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=HERE)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    for split, per_class in (("train", args.train), ("test", args.test)):
        images_name, labels_name = NAMES[split]
        images = read_idx(args.source / images_name)
        labels = read_idx(args.source / labels_name)
        keep = draw(labels, per_class, rng)
        write_idx(args.out / images_name, images[keep])
        write_idx(args.out / labels_name, labels[keep])
        print(f"{split}: {len(keep)} images, {per_class} per class")


if __name__ == "__main__":
    main()
