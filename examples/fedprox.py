"""FedProx on the ring, as a method of your own: DFedAvg plus a proximal term that keeps each
client's local training near the model it merged (Li et al., 2020).

    python -m jobs.train algorithm.name=examples.fedprox:FedProx algorithm.mu=0.01

Any importable class implementing ``ring_actors.algorithms.Algorithm`` works the same way; on a
cluster, submit the job with ``--working-dir .`` so every worker can import this module.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch.nn import functional as F

from ring_actors.algorithms import AlgorithmOptions
from ring_actors.algorithms.dfedavg import DFedAvg
from ring_actors.data.images import LabelledImages
from ring_actors.protocol import Payload


@dataclass(frozen=True)
class FedProxOptions(AlgorithmOptions):
    mu: float = 0.01  # weight of the proximal term ||w - w_merged||^2 / 2

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.mu < 0:
            raise ValueError(f"mu: must be >= 0, got {self.mu}")


class FedProx(DFedAvg):
    """Average on receipt as DFedAvg does, then train with a pull toward that average."""

    Options = FedProxOptions

    def merge(self, received: list[Payload]) -> None:
        super().merge(received)
        self.anchor = [p.detach().clone() for p in self.model.parameters()]

    def train_round(self, data: LabelledImages) -> dict[str, float]:
        anchor = getattr(self, "anchor", None) or [
            p.detach().clone() for p in self.model.parameters()
        ]
        self.model.train()
        total, steps = 0.0, 0
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
                total += float(loss.detach())
                steps += 1
        return {"loss": total / max(1, steps)}
