"""A client partition on disk: every client's train and test indices, so that two runs, two
tools or two benchmark arms can be held to the very same split."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from ring_actors.data.partition import ClientSplit

FORMAT = 1


def partition_record(splits: list[ClientSplit], dataset: str) -> dict:
    """The JSON-ready record of ``splits`` (indices into ``dataset``'s train and test sets)."""
    return {
        "format": FORMAT,
        "dataset": dataset,
        "clients": [{"train": s.train.tolist(), "test": s.test.tolist()} for s in splits],
    }


def save_partition(path: Path, splits: list[ClientSplit], dataset: str) -> Path:
    """Write ``splits`` to ``path`` (JSON); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(partition_record(splits, dataset)) + "\n")
    return path


def partition_digest(splits: list[ClientSplit]) -> str:
    """A SHA-256 of the indices alone: equal digests mean the same clients hold the same data."""
    digest = hashlib.sha256()
    for s in splits:
        for part in (s.train, s.test):
            digest.update(np.asarray(part, dtype=np.int64).tobytes())
            digest.update(b"|")
    return digest.hexdigest()


def load_partition(
    path: str | Path, dataset: str, num_train: int, num_test: int, num_clients: int
) -> list[ClientSplit]:
    """The splits stored at ``path``, checked against the dataset and client count they must fit.

    Refuses a file made for another dataset, with another number of clients, or with an index
    outside the dataset, naming the key ``data.partition.path`` and what is wrong.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"data.partition.path: no partition file at {path}")
    record = json.loads(path.read_text())
    if record.get("format") != FORMAT:
        raise ValueError(
            f"data.partition.path: {path} has format {record.get('format')!r}; "
            f"this version reads format {FORMAT}"
        )
    if record.get("dataset") != dataset:
        raise ValueError(
            f"data.partition.path: {path} splits dataset {record.get('dataset')!r}, "
            f"the config's data.dataset is {dataset!r}"
        )
    clients = record["clients"]
    if len(clients) != num_clients:
        raise ValueError(
            f"data.partition.path: {path} holds {len(clients)} clients, "
            f"the config runs {num_clients} (clients.count plus joiners)"
        )
    splits = []
    for i, entry in enumerate(clients):
        train = np.asarray(entry["train"], dtype=np.int64)
        test = np.asarray(entry["test"], dtype=np.int64)
        for name, idx, size in (("train", train, num_train), ("test", test, num_test)):
            if idx.size and (idx.min() < 0 or idx.max() >= size):
                raise ValueError(
                    f"data.partition.path: client {i}'s {name} indices leave [0, {size}) in {path}"
                )
        splits.append(ClientSplit(train=train, test=test))
    return splits
