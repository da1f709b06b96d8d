"""A tiny separable image set for algorithm tests: learnable in a few steps on a CPU."""

from __future__ import annotations

import torch

from ring_actors.client.lap_arithmetic import accumulate
from ring_actors.data.images import LabelledImages


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
