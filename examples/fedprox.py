"""FedProx on the ring, as a method of your own: DFedAvg plus a proximal term that keeps each
client's local training near the model it started the round from (Li et al., 2020).

    python -m jobs.train algorithm.name=examples.fedprox:FedProx algorithm.mu=0.01

Any importable class implementing ``ring_actors.algorithms.Algorithm`` works the same way: its
``Options`` (a frozen dataclass extending ``AlgorithmOptions``) are checked like a built-in's,
and a config may keep them in a section named after the class path. On a cluster the workers
need the module too: ``ray.py_modules=[examples]`` ships the folder with the job (or submit a
Ray Job with ``--working-dir .``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.nn import functional as F

from ring_actors.algorithms import AlgorithmOptions
from ring_actors.algorithms.dfedavg import DFedAvg
from ring_actors.data.images import LabelledImages


@dataclass(frozen=True)
class FedProxOptions(AlgorithmOptions):
    mu: float = 0.01  # weight of the proximal term ||w - w_start||^2 / 2

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.mu < 0:
            raise ValueError(f"mu: must be >= 0, got {self.mu}")


class FedProx(DFedAvg):
    """Average on receipt as DFedAvg does, then train with a pull toward that average."""

    Options = FedProxOptions

    def train_round(self, data: LabelledImages) -> dict[str, float]:
        # The model after this round's merge is FedProx's anchor: local steps stay near it.
        anchor = [p.detach().clone() for p in self.model.parameters()]
        self.model.train()
        total, steps = torch.zeros((), device=self.device), 0
        for _ in range(self.task.local_epochs):
            for x, y in data.batches(self.task.batch_size, generator=self.generator):
                loss = F.cross_entropy(self.model(x), y)
                pull = sum(
                    ((p - a) ** 2).sum()
                    for p, a in zip(self.model.parameters(), anchor, strict=True)
                )
                self.optimizer.zero_grad(set_to_none=True)
                (loss + 0.5 * self.options.mu * pull).backward()
                self.optimizer.step()
                total += loss.detach()
                steps += 1
        return {"loss": float(total) / max(1, steps)}
