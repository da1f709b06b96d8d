"""A tiny separable image set for algorithm tests: learnable in a few steps on a CPU."""

from __future__ import annotations

import numpy as np
import torch

from ring_actors.data.images import LabelledImages
from ring_actors.laps import accumulate
from ring_actors.protocol import Payload, detach_to_cpu


def separable(n=128, classes=4, shape=(1, 28, 28), seed=0) -> LabelledImages:
    """Each class lights up its own horizontal band of the image, plus noise."""
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % classes
    x = torch.randint(0, 60, (n, *shape), generator=g)
    band = shape[1] // classes
    for k in range(classes):
        x[y == k, :, k * band : (k + 1) * band] += 180
    channels = shape[0]
    return LabelledImages.from_arrays(
        x.to(torch.uint8).numpy(), y.numpy(), (0.3,) * channels, (0.3,) * channels
    )


def run_laps(algorithms: list, round_: int) -> None:
    """Run a round's ring laps over ``algorithms`` (client i is index i) without Ray."""
    for lap in algorithms[0].laps(round_):
        total: dict = {}
        contributors = []
        for client, algorithm in enumerate(algorithms):
            contribution = algorithm.contribute(lap, round_)
            if contribution:
                accumulate(total, contribution)
                contributors.append(client)
        for algorithm in algorithms:
            algorithm.apply_lap(lap, round_, total, contributors)


def learn(algorithms: list, data: list, rounds: int, exchange: str) -> tuple[list[float], list]:
    """``rounds`` rounds over clients with their ``(train, test)`` data, the shared part moved
    by ring ``laps`` or by ``pushes`` from each predecessor (merged before training): the mean
    training loss of each round, then each client's test accuracy."""
    pairs = list(zip(algorithms, data, strict=True))
    losses, pushed = [], []
    for round_ in range(rounds):
        if exchange == "pushes":
            for i, algorithm in enumerate(algorithms):
                algorithm.merge([pushed[i - 1]] if pushed else [])
        losses.append(float(np.mean([a.train_round(train)["loss"] for a, (train, _) in pairs])))
        if exchange == "laps":
            run_laps(algorithms, round_)
        else:
            pushed = [
                Payload(i, round_, 0, 0, detach_to_cpu(a.shared_state()))
                for i, a in enumerate(algorithms)
            ]
    return losses, [a.evaluate(test)["acc"] for a, (_, test) in pairs]
