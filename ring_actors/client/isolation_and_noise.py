"""The run's ``schedule.exchange`` control of what a client takes from its peers, for any
method and without it knowing: ``none`` isolates every client (nothing sent, merged or
lapped), ``noise`` keeps the traffic but merges Gaussian noise with each received floating
tensor's own mean and std. Against ``normal`` they tell whether what travels matters."""

from __future__ import annotations

import dataclasses

import torch

from ring_actors.config.sections import ExchangeMode
from ring_actors.delivery.payloads import Payload


class ExchangeControl:
    """One client's side of the control; its noise is drawn from its own seeded generator."""

    def __init__(self, mode: ExchangeMode, seed: int) -> None:
        self.mode = mode
        self.generator = torch.Generator().manual_seed(seed)

    @property
    def isolated(self) -> bool:
        """Nothing is published, gathered or lapped."""
        return self.mode == "none"

    def laps(self, names: tuple[str, ...]) -> tuple[str, ...]:
        """The method's laps for the round, or none for an isolated client."""
        return () if self.isolated else names

    def taken(self, payloads: list[Payload]) -> list[Payload]:
        """What the method merges of ``payloads``."""
        if self.mode != "noise":
            return payloads
        return [
            dataclasses.replace(p, tensors=noise_like(p.tensors, self.generator)) for p in payloads
        ]


def noise_like(
    tensors: dict[str, torch.Tensor], generator: torch.Generator
) -> dict[str, torch.Tensor]:
    """Gaussian noise of each floating tensor's mean and std, in its shape and dtype; other
    tensors (counts, indices) and single values are kept."""
    out = {}
    for key, value in tensors.items():
        if value.is_floating_point() and value.numel() > 1:
            noise = torch.randn(value.shape, generator=generator, dtype=value.dtype)
            out[key] = (value.mean() + value.std() * noise).to(value.device)
        else:
            out[key] = value
    return out
