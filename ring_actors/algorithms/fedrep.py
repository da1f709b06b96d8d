"""FedRep (Collins et al., 2021) without a server: a shared body averaged exactly by ring lap,
a personal head that never leaves the client.

Each round a client fits its head for ``head_epochs`` on the current body (body frozen), then
trains the body for ``body_epochs`` (head frozen); the lap then gives every client the
sample-weighted mean body, as FedRep's server would. Only the body travels.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ring_actors.algorithms.fedavg import FedAvg
from ring_actors.algorithms.head_body import HeadBodyAlgorithm, HeadBodyOptions
from ring_actors.data.images import LabelledImages


@dataclass(frozen=True)
class FedRepOptions(HeadBodyOptions):
    """FedRep's two phases: the DRDFL papers ran 1 head epoch and 4 body epochs a round."""


class FedRep(HeadBodyAlgorithm, FedAvg):
    """Head first, then body; the bodies are averaged by the lap FedAvg runs on whole models."""

    Options = FedRepOptions

    def train_round(self, data: LabelledImages) -> dict[str, float]:
        self.num_samples = len(data)  # the lap weight
        return super().train_round(data)

    def _float_state(self) -> dict[str, torch.Tensor]:
        """What the lap averages and a newcomer is handed: the body only."""
        return self.body_state()
