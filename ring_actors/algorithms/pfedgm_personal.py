"""pFedGM Phase 2: a client's own Gaussian head fusing the global model with its local data.

Each class logit adds a global Gaussian term (navigator mean plus an offset, the statistic
extractor's precisions times a learned diagonal scale), a local Gaussian term around the
client's own class mean, and a bias. The head trains on cached features of a frozen
generator: SGD on everything, then L-BFGS on the bias offsets alone.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from ring_actors.algorithms import optim
from ring_actors.algorithms.pfedgm_heads import quadratic


class PersonalHead(nn.Module):
    """Logits xi_k + zeta_k + b*_k + db_k over fixed global and local statistics.

    xi_k = -1/2 (z - mu*_k - dmu_k)^T (A_g a*_k) (z - mu*_k - dmu_k) (global prior),
    zeta_k = -(lam/d) (z - v*_k)^T A_c (z - v*_k) (local observations). A_g and A_c are one
    diagonal each, shared by all classes; the offsets start at zero and the scales at one,
    so before any fitting the head is the global Gaussian classifier plus the local term.
    """

    def __init__(
        self,
        means: torch.Tensor,
        biases: torch.Tensor,
        precisions: torch.Tensor,
        local_means: torch.Tensor,
        lam: float,
    ):
        super().__init__()
        classes, dim = means.shape
        self.register_buffer("global_means", means.detach().clone())
        self.register_buffer("global_biases", biases.detach().clone())
        self.register_buffer("global_precisions", precisions.detach().clone())
        self.register_buffer("local_means", local_means.detach().clone())
        self.local_weight = 2 * lam / dim  # zeta as a Gaussian: precision (2 lam / d) A_c
        self.mean_offsets = nn.Parameter(torch.zeros_like(self.global_means))
        self.bias_offsets = nn.Parameter(torch.zeros_like(self.global_biases))
        self.global_scale = nn.Parameter(torch.ones(dim, device=means.device))
        self.local_scale = nn.Parameter(torch.ones(dim, device=means.device))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        xi = quadratic(z, self.global_means + self.mean_offsets, self.global_precision())
        zeta = quadratic(z, self.local_means, self.local_precision())
        return xi + zeta + self.global_biases + self.bias_offsets

    def global_precision(self) -> torch.Tensor:
        """A_g a*_k, (K, d)."""
        return self.global_scale * self.global_precisions

    def local_precision(self) -> torch.Tensor:
        """(2 lam / d) A_c, (d,)."""
        return self.local_weight * self.local_scale

    @torch.no_grad()
    def clamp_scales(self, floor: float) -> None:
        """Keep both diagonal scales positive, so each term stays a Gaussian."""
        self.global_scale.clamp_(min=floor)
        self.local_scale.clamp_(min=floor)

    @torch.no_grad()
    def fused(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The one Gaussian per class the two terms multiply into: (means, precisions, biases).

        Precision P = P_g + P_c and mean m + G (v - m) with the gain G = P_c / P (a Kalman
        update of the global prior by the local mean); the bias absorbs what the completed
        square leaves over, so -1/2 (z - mean)^T P (z - mean) + bias equals ``forward``.
        """
        prior_precision, local_precision = self.global_precision(), self.local_precision()
        prior_means = self.global_means + self.mean_offsets
        precision = prior_precision + local_precision
        means = (prior_precision * prior_means + local_precision * self.local_means) / precision
        leftover = (
            prior_precision * prior_means.square()
            + local_precision * self.local_means.square()
            - precision * means.square()
        ).sum(-1)
        return means, precision, self.global_biases + self.bias_offsets - 0.5 * leftover


def fit_sgd(
    head: PersonalHead,
    z: torch.Tensor,
    y: torch.Tensor,
    optimizer: optim.SGD,
    epochs: int,
    batch_size: int,
    floor: float,
    generator: torch.Generator,
) -> None:
    """Mini-batch cross-entropy epochs over the cached features (the paper's FA step)."""
    for _ in range(epochs):
        order = torch.randperm(len(y), generator=generator).to(z.device)
        for start in range(0, len(y), batch_size):
            idx = order[start : start + batch_size]
            loss = F.cross_entropy(head(z[idx]), y[idx])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            head.clamp_scales(floor)


def refit_biases(
    head: PersonalHead, z: torch.Tensor, y: torch.Tensor, lr: float, max_iter: int, steps: int
) -> None:
    """Full-batch L-BFGS on the bias offsets alone (the paper's granular adaptation, GA).

    The biases carry the class priors, which differ most between label-skewed clients. The
    rest of the head is fixed here, so its logits are computed once.
    """
    with torch.no_grad():
        rest = head(z) - head.bias_offsets
    optimizer = torch.optim.LBFGS([head.bias_offsets], lr=lr, max_iter=max_iter, history_size=100)

    def closure() -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(rest + head.bias_offsets, y)
        loss.backward()
        return loss

    for _ in range(steps):
        optimizer.step(closure)
