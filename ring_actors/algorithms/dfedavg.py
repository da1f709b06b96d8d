"""Decentralised FedAvg on a ring: average the received full model with one's own."""

from __future__ import annotations

import torch

from ring_actors.algorithms.supervised import SupervisedAlgorithm
from ring_actors.protocol import Payload


class DFedAvg(SupervisedAlgorithm):
    """The whole model (parameters and buffers) is shared and averaged uniformly on receipt."""

    def shared_state(self) -> dict[str, torch.Tensor]:
        return dict(self.model.state_dict())

    def merge(self, received: list[Payload]) -> None:
        if not received:
            return
        with torch.no_grad():
            for name, value in self.model.state_dict().items():
                if not value.is_floating_point():
                    continue  # BatchNorm's batch counter: keep the local count
                incoming = [p.tensors[name].to(value.device) for p in received]
                value.copy_(torch.stack([value, *incoming]).mean(0))
