"""Local training only: the no-collaboration baseline."""

from __future__ import annotations

import torch

from ring_actors.algorithms.supervised import SupervisedAlgorithm
from ring_actors.delivery.payloads import Payload


class Local(SupervisedAlgorithm):
    """Each client trains its own model and sends nothing."""

    def shared_state(self) -> dict[str, torch.Tensor]:
        return {}

    def merge(self, received: list[Payload]) -> None:
        """Nothing is ever received."""
