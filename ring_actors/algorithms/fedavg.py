"""FedAvg without a server: the exact sample-weighted model average by one ring lap a round."""

from __future__ import annotations

import torch

from ring_actors.algorithms.base import AlgorithmOptions, TaskSpec
from ring_actors.algorithms.supervised import SupervisedAlgorithm
from ring_actors.data.images import LabelledImages
from ring_actors.delivery.payloads import Payload

WEIGHT = "#samples"


class FedAvg(SupervisedAlgorithm):
    """Every round each client adds ``n * theta`` and ``n`` into the lap; all divide alike.

    Nothing is pushed point-to-point; the lap gives every client the same average that a
    server would compute over the clients that contributed. Integer buffers (BatchNorm's
    batch counter) stay local.
    """

    def __init__(self, options: AlgorithmOptions, task: TaskSpec) -> None:
        super().__init__(options, task)
        self.num_samples = 0  # the lap weight: this client's training-set size

    def train_round(self, data: LabelledImages) -> dict[str, float]:
        self.num_samples = len(data)
        return super().train_round(data)

    def shared_state(self) -> dict[str, torch.Tensor]:
        return {}

    def merge(self, received: list[Payload]) -> None:
        """Nothing is pushed; the lap does the averaging."""

    def laps(self, round_: int) -> tuple[str, ...]:
        return ("average",)

    def contribute(self, lap: str, round_: int) -> dict[str, torch.Tensor]:
        weight = float(self.num_samples)
        out = {k: v * weight for k, v in self._float_state().items()}
        out[WEIGHT] = torch.tensor(weight)
        return out

    def apply_lap(
        self, lap: str, round_: int, total: dict[str, torch.Tensor], contributors: list[int]
    ) -> None:
        weight = float(total.get(WEIGHT, torch.tensor(0.0)))
        if weight <= 0:
            return  # nobody contributed: keep the local model
        with torch.no_grad():
            for name, value in self._float_state().items():
                value.copy_(total[name].to(value.device) / weight)

    def hand_off_state(self) -> dict[str, torch.Tensor]:
        return self._float_state()

    def init_from(self, received: Payload) -> None:
        with torch.no_grad():
            for name, value in self._float_state().items():
                value.copy_(received.tensors[name].to(value.device))

    def _float_state(self) -> dict[str, torch.Tensor]:
        return {k: v for k, v in self.model.state_dict().items() if v.is_floating_point()}
