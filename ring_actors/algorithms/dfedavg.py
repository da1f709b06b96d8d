"""Decentralised FedAvg on a ring: average the received full model with one's own."""

from __future__ import annotations

import torch

from ring_actors.algorithms.supervised import SupervisedAlgorithm
from ring_actors.delivery.payloads import Payload


class DFedAvg(SupervisedAlgorithm):
    """The whole model (parameters and buffers) is shared and averaged uniformly on receipt.

    Uniform weights over self and the in-neighbours are D-PSGD's mixing matrix for a graph
    where every client hears the same number of peers (ring, bidirectional ring, full,
    exponential): doubly stochastic, so the clients agree on the plain average of the models.
    Weighting by sample counts would break the column sums and pull the consensus toward
    the larger clients; with equal client sizes the two coincide.
    """

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
