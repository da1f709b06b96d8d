"""FedBN (Li et al., 2021) without a server: BatchNorm layers stay local, the rest is averaged
exactly by ring lap.

Each client keeps its BatchNorm affine parameters and running statistics, which absorb its own
feature shift; every other real-valued tensor is the sample-weighted mean over the clients, as
FedBN's server computes it. BatchNorm layers are found by module type, not by name, so a
ResNet's shortcut normalisation stays local too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

import torch
from torch import nn

from ring_actors.algorithms.base import AlgorithmOptions, TaskSpec
from ring_actors.algorithms.fedavg import FedAvg
from ring_actors.plugins.paths import BACKBONE_PLUGIN


@dataclass(frozen=True)
class FedBNOptions(AlgorithmOptions):
    """FedBN needs BatchNorm layers: the small CNN with BatchNorm, the ResNet-18, or a
    backbone of one's own that has some."""

    backbone: Annotated[Literal["cnn_bn", "resnet18"], BACKBONE_PLUGIN] = "cnn_bn"


def batch_norm_keys(model: nn.Module) -> tuple[str, ...]:
    """State-dict keys of every BatchNorm layer: affine parameters, statistics, counters."""
    return tuple(
        f"{prefix}.{name}" if prefix else name
        for prefix, module in model.named_modules()
        if isinstance(module, nn.modules.batchnorm._BatchNorm)
        for name in module.state_dict()
    )


class FedBN(FedAvg):
    """FedAvg's exact lap over everything but the BatchNorm layers, which stay personal."""

    Options = FedBNOptions

    def __init__(self, options: FedBNOptions, task: TaskSpec) -> None:
        super().__init__(options, task)
        self.local_keys = batch_norm_keys(self.model)
        if not self.local_keys:
            raise ValueError(
                f"fedbn keeps BatchNorm layers local, but backbone {options.backbone!r} has "
                "none (it would be fedavg): use algorithm.backbone=cnn_bn or resnet18"
            )

    def _float_state(self) -> dict[str, torch.Tensor]:
        """What the lap averages and a newcomer is handed: all but the BatchNorm layers."""
        local = set(self.local_keys)
        return {
            k: v
            for k, v in self.model.state_dict().items()
            if v.is_floating_point() and k not in local
        }
