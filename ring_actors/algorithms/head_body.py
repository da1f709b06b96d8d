"""A personal head on a shared body, trained alternately: the local update of FedRep and DFedPGP.

Both methods keep the backbone's final linear layer (``model.head``) on the client and let
the feature extractor (``model.body``) travel. Each round the head is fitted first with the
body frozen, then the body with the head frozen; they differ only in how bodies are combined
(an exact ring-lap average for FedRep, gossip with neighbours for DFedPGP).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.nn import functional as F

from ring_actors.algorithms import optim
from ring_actors.algorithms.base import AlgorithmOptions, TaskSpec
from ring_actors.algorithms.supervised import SupervisedAlgorithm
from ring_actors.data.images import LabelledImages

BODY = "body."  # state-dict prefix of the shared part


@dataclass(frozen=True)
class HeadBodyOptions(AlgorithmOptions):
    """Epochs and step size of the two phases of a round."""

    head_epochs: int = 1
    body_epochs: int | None = None  # None: the run's clients.local_epochs
    head_lr: float | None = None  # None: lr

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.head_epochs < 0:
            raise ValueError(f"head_epochs: must be >= 0, got {self.head_epochs}")
        if self.body_epochs is not None and self.body_epochs < 0:
            raise ValueError(f"body_epochs: must be >= 0, got {self.body_epochs}")
        if self.head_lr is not None and not self.head_lr > 0:
            raise ValueError(f"head_lr: must be > 0, got {self.head_lr}")


class HeadBodyAlgorithm(SupervisedAlgorithm):
    """A backbone whose head and body have their own optimizers and are trained in turn."""

    options: HeadBodyOptions

    def __init__(self, options: HeadBodyOptions, task: TaskSpec) -> None:
        super().__init__(options, task)
        # Separate optimizers keep each phase's moments (momentum, Adam) to its own part.
        self.optimizer = self.make_optimizer(self.model.body.parameters())
        self.head_optimizer = self.make_optimizer(self.model.head.parameters())
        if options.head_lr is not None:
            self.head_optimizer.param_groups[0]["lr"] = options.head_lr

    def body_state(self) -> dict[str, torch.Tensor]:
        """The shared part: the body's real-valued state (BatchNorm counters stay local)."""
        return {
            k: v
            for k, v in self.model.state_dict().items()
            if k.startswith(BODY) and v.is_floating_point()
        }

    def train_round(self, data: LabelledImages) -> dict[str, float]:
        self.model.train()
        body_epochs = self.options.body_epochs
        if body_epochs is None:
            body_epochs = self.task.local_epochs
        head_loss = self._phase(data, self.options.head_epochs, self.head_optimizer, head=True)
        self.model.head.requires_grad_(False)
        try:
            body_loss = self._phase(data, body_epochs, self.optimizer, head=False)
        finally:
            self.model.head.requires_grad_(True)
        return {"loss_head": head_loss, "loss": body_loss}

    def _phase(
        self, data: LabelledImages, epochs: int, optimizer: optim.SGD | optim.Adam, head: bool
    ) -> float:
        """Mean loss of ``epochs`` passes updating the head only (``head``) or the body only."""
        total, steps = torch.zeros((), device=self.device), 0
        for _ in range(epochs):
            for x, y in data.batches(self.task.batch_size, generator=self.generator):
                if head:
                    # A frozen body needs no graph; in training mode its BatchNorm
                    # statistics still track, as in the reference code.
                    with torch.no_grad():
                        features = self.model.body(x)
                    logits = self.model.head(features)
                else:
                    logits = self.model(x)
                loss = F.cross_entropy(logits, y)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                total += loss.detach()
                steps += 1
        return float(total) / max(1, steps)
