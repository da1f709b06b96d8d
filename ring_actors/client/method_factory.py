"""One recipe for a client's method, seeds and data, used by the actors, the in-process ring,
the benchmarks and the tests alike."""

from __future__ import annotations

import numpy as np
import torch

from ring_actors.algorithms import Algorithm, TaskSpec
from ring_actors.client.resources import ClientData
from ring_actors.config import Config
from ring_actors.data.images import LabelledImages
from ring_actors.data.partition import ClientSplit
from ring_actors.data.sources import DatasetArrays
from ring_actors.plugins.methods import resolve_algorithm

SEED_STRIDE = 100_003  # a prime: client seeds of different experiment seeds never collide


def client_seed(experiment_seed: int, client_id: int) -> int:
    """The private seed of one client (its model's initialisation, its batches)."""
    return experiment_seed * SEED_STRIDE + client_id


def task_spec(
    config: Config,
    client_id: int,
    num_classes: int,
    input_shape: tuple[int, int, int],
    device: torch.device,
) -> TaskSpec:
    """What a client's method knows of its task: classes, shapes, epochs, device, seeds."""
    seed = config.experiment.seed
    return TaskSpec(
        num_classes=num_classes,
        input_shape=input_shape,
        local_epochs=config.clients.local_epochs,
        batch_size=config.clients.batch_size,
        device=device,
        seed=client_seed(seed, client_id),
        shared_seed=seed,
    )


def build_algorithm(
    config: Config,
    client_id: int,
    num_classes: int,
    input_shape: tuple[int, int, int],
    device: torch.device,
) -> Algorithm:
    """The configured method for one client, with its options and seeds."""
    task = task_spec(config, client_id, num_classes, input_shape, device)
    return resolve_algorithm(config.algorithm.name)(config.algorithm.options, task)


def client_data(
    dataset: DatasetArrays,
    split: ClientSplit,
    global_test: tuple[np.ndarray, np.ndarray],
    device: torch.device,
) -> ClientData:
    """A client's splits on ``device``; on the CPU they share the arrays they were read from."""

    def images(x: np.ndarray, y: np.ndarray, to: torch.device) -> LabelledImages:
        return LabelledImages.from_arrays(x, y, dataset.mean, dataset.std, to)

    return ClientData(
        train=images(dataset.train_x[split.train], dataset.train_y[split.train], device),
        local_test=images(dataset.test_x[split.test], dataset.test_y[split.test], device),
        global_test=images(*global_test, device),
    )
