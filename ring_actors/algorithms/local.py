"""Local training only: the no-collaboration baseline.

DRDFL's papers run it with plain SGD ("each client only performs SGD"): ``optimizer=sgd,
momentum=0`` (``jobs/configs/paper/local-cifar10-shard4.yaml``); the default is this
project's Adam, the optimiser every Adam method here is compared with.
"""

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
