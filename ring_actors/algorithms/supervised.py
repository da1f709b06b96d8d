"""Plain supervised training of one backbone: the building block of the baselines."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from ring_actors.algorithms.base import Algorithm, AlgorithmOptions, TaskSpec
from ring_actors.data.images import LabelledImages
from ring_actors.models import build_backbone


class SupervisedAlgorithm(Algorithm):
    """A backbone trained with cross-entropy; subclasses decide what is shared and how merged."""

    def __init__(self, options: AlgorithmOptions, task: TaskSpec) -> None:
        super().__init__(options, task)
        # The same seed on every client gives them a common starting point, which model
        # averaging needs; private shuffling uses the client's own seed.
        torch.manual_seed(task.shared_seed)
        self.model: nn.Module = build_backbone(
            options.backbone, task.input_shape, task.num_classes
        ).to(task.device)
        self.optimizer = self.make_optimizer(self.model.parameters())
        self.generator = torch.Generator().manual_seed(task.seed)

    def train_round(self, data: LabelledImages) -> dict[str, float]:
        self.model.train()
        total, steps = torch.zeros((), device=self.device), 0
        for _ in range(self.task.local_epochs):
            for x, y in data.batches(self.task.batch_size, generator=self.generator):
                loss = F.cross_entropy(self.model(x), y)
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                self.step()
                total += loss.detach()
                steps += 1
        return {"loss": float(total) / max(1, steps)}  # one device sync per round

    def step(self) -> None:
        """One optimiser step on the gradients just computed (a method may constrain it)."""
        self.optimizer.step()

    def predict(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        self.model.eval()
        return {"acc": self.model(x)}
