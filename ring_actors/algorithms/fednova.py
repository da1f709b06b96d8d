"""FedNova (Wang et al., 2020) without a server: normalised averaging, exact by ring lap.

Clients that take more local steps move further, and plain averaging then drifts toward their
objectives. FedNova averages each client's *normalised* update instead. With ``tau`` SGD steps
and heavy-ball momentum ``rho`` (buffer reset each round), client i's update is
``w_g - w_i = lr * sum_s c_s g_s``, where ``c_s = (1 - rho**(tau - s + 1)) / (1 - rho)`` is how
far gradient s moves the weights in all; their sum is

    a_i = (tau - rho * (1 - rho**tau) / (1 - rho)) / (1 - rho)      (a_i = tau when rho = 0),

so ``d_i = (w_g - w_i) / a_i`` is its average step. With ``p_i = n_i / sum n``, the server's
update ``w_g <- w_g - (sum p_i a_i) * (sum p_i d_i)`` needs only sums, which one lap carries:
each client adds ``n_i d_i``, ``n_i a_i`` and ``n_i``. Equal ``a_i`` give the sample-weighted
model average, FedAvg's step. Real-valued buffers (BatchNorm statistics) are not moved by
gradients and are averaged with the same weights; integer counters stay local.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from ring_actors.algorithms.base import AlgorithmOptions, TaskSpec
from ring_actors.algorithms.fedavg import WEIGHT, FedAvg
from ring_actors.data.images import LabelledImages

STEPS = "#a"  # the lap key holding sum n_i a_i


@dataclass(frozen=True)
class FedNovaOptions(AlgorithmOptions):
    """FedNova normalises SGD steps; defaults are those of FedFed's FedNova baseline."""

    lr: float = 0.01
    optimizer: Literal["sgd"] = "sgd"
    momentum: float = 0.9


def normalising_factor(steps: int, momentum: float) -> float:
    """a_i: the sum over local steps of how much each gradient moved the weights (in lr)."""
    if momentum == 0:
        return float(steps)
    rho = momentum
    return (steps - rho * (1 - rho**steps) / (1 - rho)) / (1 - rho)


class FedNova(FedAvg):
    """FedAvg's lap carrying normalised updates: every client applies the same FedNova step."""

    Options = FedNovaOptions

    def __init__(self, options: FedNovaOptions, task: TaskSpec) -> None:
        super().__init__(options, task)
        self.factor = 0.0  # a_i of the last round
        self.start: dict[str, torch.Tensor] = {}  # w_g: the weights the round began from

    def train_round(self, data: LabelledImages) -> dict[str, float]:
        self.start = {k: v.detach().clone() for k, v in self.model.named_parameters()}
        self.optimizer.state.clear()  # a_i assumes the momentum buffer starts at zero
        steps = self.task.local_epochs * math.ceil(len(data) / self.task.batch_size)
        self.factor = normalising_factor(steps, self.options.momentum)
        return super().train_round(data)

    def contribute(self, lap: str, round_: int) -> dict[str, torch.Tensor]:
        if self.factor <= 0:
            return {}  # no step taken: nothing to normalise
        n = float(self.num_samples)
        out = {}
        for name, value in self._float_state().items():
            if name in self.start:  # n_i d_i
                out[name] = (self.start[name] - value) * (n / self.factor)
            else:  # a buffer: n_i * value
                out[name] = value * n
        out[STEPS] = torch.tensor(n * self.factor)
        out[WEIGHT] = torch.tensor(n)
        return out

    def apply_lap(
        self, lap: str, round_: int, total: dict[str, torch.Tensor], contributors: list[int]
    ) -> None:
        weight = float(total.get(WEIGHT, torch.tensor(0.0)))
        if weight <= 0:
            return  # nobody contributed: keep the local model
        tau_eff = float(total[STEPS]) / weight
        with torch.no_grad():
            for name, value in self._float_state().items():
                mean = total[name].to(value.device) / weight
                if name in self.start:
                    value.copy_(self.start[name] - tau_eff * mean)
                else:
                    value.copy_(mean)
