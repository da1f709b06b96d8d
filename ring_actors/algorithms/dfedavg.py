"""Decentralised FedAvg on a ring: average the received full model with one's own."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ring_actors.algorithms.base import AlgorithmOptions
from ring_actors.algorithms.staleness import staleness_weights, weighted_average
from ring_actors.algorithms.supervised import SupervisedAlgorithm
from ring_actors.delivery.payloads import Payload


@dataclass(frozen=True)
class DFedAvgOptions(AlgorithmOptions):
    # A received model s rounds old weighs (1 + s) ** -staleness_exponent against one's own
    # (see ring_actors.algorithms.staleness); 0: the plain average.
    staleness_exponent: float = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.staleness_exponent >= 0:
            raise ValueError(f"staleness_exponent: must be >= 0, got {self.staleness_exponent}")


class DFedAvg(SupervisedAlgorithm):
    """The whole model (parameters and buffers) is shared and averaged uniformly on receipt.

    Uniform weights over self and the in-neighbours are D-PSGD's mixing matrix for a graph
    where every client hears the same number of peers (ring, bidirectional ring, full,
    exponential): doubly stochastic, so the clients agree on the plain average of the models.
    Weighting by sample counts would break the column sums and pull the consensus toward
    the larger clients; with equal client sizes the two coincide. With a
    ``staleness_exponent``, older states count less (asynchronous rings).
    """

    Options = DFedAvgOptions

    def shared_state(self) -> dict[str, torch.Tensor]:
        return dict(self.model.state_dict())

    def merge(self, received: list[Payload]) -> None:
        if not received:
            return
        exponent = getattr(self.options, "staleness_exponent", 0.0)
        weights = staleness_weights(self.current_round, [p.round for p in received], exponent)
        with torch.no_grad():
            for name, value in self.model.state_dict().items():
                if not value.is_floating_point():
                    continue  # BatchNorm's batch counter: keep the local count
                incoming = [p.tensors[name].to(value.device) for p in received]
                weighted_average(value, incoming, weights, out=value)
