"""Split dataset indices among clients (IID or label-skewed), with test splits mirroring them."""

from __future__ import annotations

import operator
from dataclasses import dataclass

import numpy as np

PARTITIONS = ("iid", "dirichlet", "shard")

# Draws tried before a Dirichlet partition with min_size is declared infeasible.
_DIRICHLET_TRIES = 1000


@dataclass(frozen=True, eq=False)
class ClientSplit:
    """One client's sorted int64 indices into the train set and into the test set."""

    train: np.ndarray
    test: np.ndarray


def _labels(labels: np.ndarray, what: str) -> np.ndarray:
    arr = np.asarray(labels)
    if arr.ndim != 1 or not (np.issubdtype(arr.dtype, np.integer) or arr.size == 0):
        raise ValueError(f"{what} must be a 1-D integer array, got {arr.dtype} {arr.shape}")
    if arr.size and arr.min() < 0:
        raise ValueError(f"{what} must be non-negative class ids")
    return arr.astype(np.int64, copy=False)


def _check_args(num_clients: int, kind: str) -> int:
    """Validated ``num_clients`` as an int."""
    if kind not in PARTITIONS:
        raise ValueError(f"unknown partition {kind!r}; choose one of {', '.join(PARTITIONS)}")
    try:
        n = operator.index(num_clients)
    except TypeError:
        n = 0
    if n < 1:
        raise ValueError(f"num_clients must be an integer >= 1, got {num_clients!r}")
    return n


def _class_indices(labels: np.ndarray, rng: np.random.Generator) -> dict[int, np.ndarray]:
    """Shuffled indices of each class present in ``labels``."""
    return {int(c): rng.permutation(np.flatnonzero(labels == c)) for c in np.unique(labels)}


def _largest_remainder(weights: np.ndarray, total: int) -> np.ndarray:
    """Integer counts summing to ``total``, proportional to ``weights`` (largest remainder)."""
    quotas = weights / weights.sum() * total
    counts = np.floor(quotas).astype(np.int64)
    short = total - int(counts.sum())
    counts[np.argsort(counts - quotas, kind="stable")[:short]] += 1
    return counts


def _finish(parts: list[list[np.ndarray]]) -> list[np.ndarray]:
    return [
        np.sort(np.concatenate(p)).astype(np.int64) if p else np.zeros(0, np.int64) for p in parts
    ]


def _iid(labels: np.ndarray, num_clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    if labels.size < num_clients:
        raise ValueError(f"iid partition: {labels.size} samples cannot fill {num_clients} clients")
    return _finish([[p] for p in np.array_split(rng.permutation(labels.size), num_clients)])


def _dirichlet(
    labels: np.ndarray, num_clients: int, beta: float, min_size: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """Per class, proportions over clients from Dir(beta); redrawn until all reach min_size."""
    if beta <= 0:
        raise ValueError(f"dirichlet partition needs beta > 0, got {beta}")
    if min_size * num_clients > labels.size:
        raise ValueError(
            f"dirichlet partition: {num_clients} clients x min_size {min_size} "
            f"exceeds the {labels.size} samples"
        )
    by_class = _class_indices(labels, rng)
    sizes = np.array([len(idx) for idx in by_class.values()])
    for _ in range(_DIRICHLET_TRIES):
        props = rng.dirichlet(np.full(num_clients, beta), size=len(sizes))  # (classes, clients)
        cuts = np.floor(np.cumsum(props, axis=1) * sizes[:, None]).astype(np.int64)
        cuts[:, -1] = sizes
        counts = np.diff(cuts, axis=1, prepend=0)
        if counts.sum(axis=0).min() >= min_size:
            break
    else:
        raise ValueError(
            f"dirichlet partition: no draw in {_DIRICHLET_TRIES} tries gave each of "
            f"{num_clients} clients at least min_size={min_size} samples (beta={beta}); "
            "raise beta, lower min_size or use fewer clients"
        )
    parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for idx, row in zip(by_class.values(), cuts, strict=True):
        for client, chunk in enumerate(np.split(idx, row[:-1])):
            parts[client].append(chunk)
    return _finish(parts)


def _shard(
    labels: np.ndarray, num_clients: int, classes_per_client: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """Each client gets ``classes_per_client`` classes; classes are shared as evenly as possible.

    Clients pick, in turn, the least-used classes (ties broken at random), so class usage
    counts never differ by more than one; each class is split evenly among its holders.
    """
    by_class = _class_indices(labels, rng)
    classes = np.array(sorted(by_class))
    if not 1 <= classes_per_client <= len(classes):
        raise ValueError(
            f"shard partition: classes_per_client must be in 1..{len(classes)} "
            f"(the number of classes present), got {classes_per_client}"
        )
    usage = np.zeros(len(classes))
    holders: dict[int, list[int]] = {int(c): [] for c in classes}
    for client in range(num_clients):
        picked = np.argsort(usage + 0.5 * rng.random(len(classes)))[:classes_per_client]
        usage[picked] += 1
        for c in classes[picked]:
            holders[int(c)].append(client)
    parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for c, clients in holders.items():
        if not clients:
            continue
        if len(by_class[c]) < len(clients):
            raise ValueError(
                f"shard partition: class {c} has {len(by_class[c])} samples "
                f"but is shared by {len(clients)} clients"
            )
        for client, chunk in zip(clients, np.array_split(by_class[c], len(clients)), strict=True):
            parts[client].append(chunk)
    return _finish(parts)


def partition_train(
    labels: np.ndarray,
    num_clients: int,
    kind: str,
    *,
    beta: float = 0.5,
    classes_per_client: int = 2,
    min_size: int = 10,
    seed: int = 0,
) -> list[np.ndarray]:
    """Disjoint sorted int64 train indices per client.

    ``iid``: random equal split. ``dirichlet``: per-class Dir(``beta``) proportions, every
    client with at least ``min_size`` samples. ``shard``: ``classes_per_client`` classes per
    client. iid and dirichlet cover every index; shard every index of an assigned class.
    """
    num_clients = _check_args(num_clients, kind)
    labels = _labels(labels, "labels")
    rng = np.random.default_rng(seed)
    if kind == "iid":
        return _iid(labels, num_clients, rng)
    if kind == "dirichlet":
        return _dirichlet(labels, num_clients, beta, min_size, rng)
    return _shard(labels, num_clients, classes_per_client, rng)


def _class_counts(parts: list[np.ndarray], labels: np.ndarray, num_classes: int) -> np.ndarray:
    """(clients, classes) sample counts."""
    return np.stack([np.bincount(labels[p], minlength=num_classes) for p in parts])


def mirror_test(
    train_parts: list[np.ndarray],
    train_labels: np.ndarray,
    test_labels: np.ndarray,
    seed: int = 0,
) -> list[np.ndarray]:
    """Disjoint test indices per client whose class mix matches the client's train mix.

    Each class's test indices are split among clients in proportion to their train counts of
    that class (largest-remainder rounding), so the union is every test index of a class that
    some client holds.
    """
    if not train_parts:
        raise ValueError("mirror_test needs at least one client's train indices")
    train_labels = _labels(train_labels, "train_labels")
    test_labels = _labels(test_labels, "test_labels")
    num_classes = int(max(train_labels.max(initial=-1), test_labels.max(initial=-1))) + 1
    counts = _class_counts(train_parts, train_labels, num_classes)
    rng = np.random.default_rng(seed)
    parts: list[list[np.ndarray]] = [[] for _ in train_parts]
    for c, idx in _class_indices(test_labels, rng).items():
        held = counts[:, c]
        if held.sum() == 0:
            continue
        alloc = _largest_remainder(held.astype(np.float64), len(idx))
        for client, chunk in enumerate(np.split(idx, np.cumsum(alloc)[:-1])):
            parts[client].append(chunk)
    return _finish(parts)


def _cap(
    parts: list[np.ndarray], labels: np.ndarray, limit: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """Subsample clients above ``limit`` to exactly ``limit``, keeping their class mix."""
    num_classes = int(labels.max(initial=-1)) + 1
    out = []
    for part in parts:
        if len(part) <= limit:
            out.append(part)
            continue
        counts = np.bincount(labels[part], minlength=num_classes)
        keep = _largest_remainder(counts.astype(np.float64), limit)
        chosen = [
            rng.choice(part[labels[part] == c], size=k, replace=False)
            for c, k in enumerate(keep)
            if k
        ]
        out.append(np.sort(np.concatenate(chosen)).astype(np.int64))
    return out


def split_clients(
    train_labels: np.ndarray,
    test_labels: np.ndarray,
    num_clients: int,
    kind: str,
    *,
    beta: float = 0.5,
    classes_per_client: int = 2,
    min_size: int = 10,
    max_train_per_client: int | None = None,
    seed: int = 0,
) -> list[ClientSplit]:
    """Train partition (optionally capped per client) plus test splits mirroring it.

    The test splits are mirrored from the uncapped partition: the cap keeps each client's class
    mix, so test mixes still match train mixes, and the test splits still cover the full test
    set. (Mirroring the capped counts would skew every client's test mix, because capping
    changes how a class's samples are shared among clients.)
    """
    if max_train_per_client is not None and max_train_per_client < 1:
        raise ValueError(f"max_train_per_client must be >= 1, got {max_train_per_client}")
    train_labels = _labels(train_labels, "train_labels")
    parts = partition_train(
        train_labels,
        num_clients,
        kind,
        beta=beta,
        classes_per_client=classes_per_client,
        min_size=min_size,
        seed=seed,
    )
    tests = mirror_test(parts, train_labels, test_labels, seed=seed)
    if max_train_per_client is not None:
        parts = _cap(parts, train_labels, max_train_per_client, np.random.default_rng([seed, 1]))
    return [ClientSplit(train=tr, test=te) for tr, te in zip(parts, tests, strict=True)]
