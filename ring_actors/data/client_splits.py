"""Which samples each client trains and tests on, as a config says: the one recipe a launch
on Ray, the in-process ring and the benchmarks share, so every backend sees the same clients."""

from __future__ import annotations

import numpy as np

from ring_actors.config import Config
from ring_actors.data.partition import ClientSplit, split_clients
from ring_actors.data.partition_file import load_partition
from ring_actors.data.sources import DatasetArrays


def split_for(config: Config, dataset: DatasetArrays) -> list[ClientSplit]:
    """Every client's train and test indices, late joiners included, as the config says.

    With ``joiner_classes: other_half`` the first clients share the lower half of the classes
    and the joiners the upper half: newcomers bring classes the ring has never seen. With
    ``kind: file`` the split is read, as it is, from the file an earlier run wrote.
    """
    part = config.data.partition
    if part.kind == "file":  # the exact split of an earlier run: no cap, no class halves
        return load_partition(
            part.path,
            config.data.dataset,
            len(dataset.train_y),
            len(dataset.test_y),
            config.total_clients,
        )
    joiners = config.total_clients - config.clients.count
    if part.joiner_classes == "all" or joiners == 0:
        return _split(config, dataset, config.total_clients, None)
    half = dataset.num_classes // 2
    return _split(config, dataset, config.clients.count, (0, half)) + _split(
        config, dataset, joiners, (half, dataset.num_classes)
    )


def _split(
    config: Config, dataset: DatasetArrays, count: int, classes: tuple[int, int] | None
) -> list[ClientSplit]:
    """``count`` clients' splits over the samples whose label lies in ``classes`` (all: None)."""
    part = config.data.partition
    train = _in_classes(dataset.train_y, classes)
    test = _in_classes(dataset.test_y, classes)
    splits = split_clients(
        dataset.train_y[train],
        dataset.test_y[test],
        count,
        part.kind,
        beta=part.beta,
        classes_per_client=part.classes_per_client,
        min_size=part.min_size,
        max_train_per_client=config.data.max_train_per_client,
        seed=config.experiment.seed if classes is None else config.experiment.seed + classes[0],
    )
    return [ClientSplit(train=train[s.train], test=test[s.test]) for s in splits]


def _in_classes(labels: np.ndarray, classes: tuple[int, int] | None) -> np.ndarray:
    if classes is None:
        return np.arange(len(labels), dtype=np.int64)
    low, high = classes
    return np.flatnonzero((labels >= low) & (labels < high)).astype(np.int64)


def evaluated_split(config: Config, split: ClientSplit, client_id: int) -> ClientSplit:
    """A client's split with its test part cut to ``eval.local_max_samples``: a subset
    seeded by the run's seed and the client, so every backend and a resume score the same
    images. The partition file and Global-T keep the whole split."""
    seed = (config.experiment.seed, client_id)
    test = seeded_subset(split.test, config.eval.local_max_samples, seed)
    return split if test is split.test else ClientSplit(split.train, test)


def seeded_subset(indices: np.ndarray, cap: int | None, seed: int | tuple[int, ...]) -> np.ndarray:
    """``cap`` of ``indices`` drawn with ``seed``, sorted; all of them (the same array) when
    there are no more than ``cap``."""
    if cap is None or cap >= len(indices):
        return indices
    return np.sort(np.random.default_rng(seed).choice(indices, size=cap, replace=False))


def global_test_indices(splits: list[ClientSplit], cap: int | None, seed: int) -> np.ndarray:
    """The Global-T set: the union of all clients' test splits, or a seeded subset of it."""
    return seeded_subset(np.sort(np.concatenate([s.test for s in splits])), cap, seed)


def global_test_set(
    config: Config, dataset: DatasetArrays, splits: list[ClientSplit]
) -> tuple[np.ndarray, np.ndarray]:
    """The Global-T images and labels the config asks for, shared by every client."""
    pick = global_test_indices(splits, config.eval.global_max_samples, config.experiment.seed)
    return dataset.test_x[pick], dataset.test_y[pick]
