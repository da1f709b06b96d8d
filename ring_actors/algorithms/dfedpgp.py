"""DFedPGP (Liu et al., CVPR 2024): a personal head and a body shared by gossip, on any topology.

Each round a client averages the bodies its in-neighbours pushed with its own, fits its
personal linear head with that body frozen, trains the body with the head frozen, and pushes
the body to its out-neighbours. Nothing passes through a server or around a lap, so the same
method runs on a ring, a dynamic random graph or a full mesh.

The mix is the uniform mean over self and the in-neighbours heard this round, as in the
public DFedPGP code (no push-sum weights): doubly stochastic when every client hears the same
number of peers (ring, bidirectional ring, full, exponential), see :class:`DFedAvg`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ring_actors.algorithms.head_body import HeadBodyAlgorithm, HeadBodyOptions
from ring_actors.algorithms.staleness import weighted_average
from ring_actors.delivery.payloads import Payload


@dataclass(frozen=True)
class DFedPGPOptions(HeadBodyOptions):
    """Head epochs, body epochs and a separate head step size (``head_lr``)."""


class DFedPGP(HeadBodyAlgorithm):
    """Personal head, gossip-averaged body, alternating local updates."""

    Options = DFedPGPOptions

    def shared_state(self) -> dict[str, torch.Tensor]:
        return self.body_state()

    def merge(self, received: list[Payload]) -> None:
        if not received:
            return
        with torch.no_grad():
            for name, value in self.body_state().items():
                incoming = [p.tensors[name].to(value.device) for p in received]
                weighted_average(value, incoming, [1.0] * len(incoming), out=value)
