"""pFedGM's Gaussian classifier pieces and its Phase-1 objectives, as plain tensor functions."""

from __future__ import annotations

import torch
from torch.nn import functional as F


def quadratic(z: torch.Tensor, means: torch.Tensor, precisions: torch.Tensor) -> torch.Tensor:
    """-1/2 (z - mu_k)^T diag(a_k) (z - mu_k) for every sample and class, shape (B, K).

    ``means`` is (K, d); ``precisions`` broadcasts against it: (K, d), (d,) or a scalar.
    """
    diff = z.unsqueeze(1) - means.unsqueeze(0)
    return -0.5 * (diff.square() * precisions).sum(-1)


def navigator_logits(z: torch.Tensor, means: torch.Tensor, biases: torch.Tensor) -> torch.Tensor:
    """The navigator: a Gaussian classifier with identity covariance, -1/2 |z - mu_k|^2 + b_k.

    Written with the means themselves rather than as a linear layer: the two agree up to a
    per-sample constant, but here the -1/2 |mu_k|^2 term ties the bias gradient to the means.
    """
    diff = z.unsqueeze(1) - means.unsqueeze(0)
    return -0.5 * diff.square().sum(-1) + biases


def gaussian_logits(
    z: torch.Tensor, means: torch.Tensor, precisions: torch.Tensor, biases: torch.Tensor
) -> torch.Tensor:
    """The full Gaussian classifier with diagonal precisions a_k (no log-determinant term)."""
    return quadratic(z, means, precisions) + biases


def phase1_losses(
    z: torch.Tensor,
    y: torch.Tensor,
    means: torch.Tensor,
    biases: torch.Tensor,
    precisions: torch.Tensor,
    prototypes: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(shared, local, statistic) losses of one mini-batch.

    shared: the navigator's cross-entropy, for the generator and the navigator.
    local: (1/(n d)) sum_j |z_j - v_{y_j}|^2 with the client's class prototypes v held fixed
    (the paper's theorem: the gradient through v vanishes at the class mean).
    statistic: the full Gaussian cross-entropy with features, means and biases detached, so
    it trains only the diagonal precisions and leaves the body's training untouched.
    """
    shared = F.cross_entropy(navigator_logits(z, means, biases), y)
    local = (z - prototypes[y]).square().sum(1).mean() / z.shape[1]
    statistic = F.cross_entropy(
        gaussian_logits(z.detach(), means.detach(), precisions, biases.detach()), y
    )
    return shared, local, statistic


def class_means(
    z: torch.Tensor, y: torch.Tensor, fallback: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-class feature means (K, d) and counts (K,); classes without samples take ``fallback``."""
    classes = fallback.shape[0]
    counts = torch.bincount(y, minlength=classes)
    sums = torch.zeros_like(fallback).index_add_(0, y, z)
    means = sums / counts.clamp(min=1).unsqueeze(1).to(sums.dtype)
    return torch.where(counts.unsqueeze(1) > 0, means, fallback), counts


@torch.no_grad()
def adjust_prototypes(
    prototypes: torch.Tensor, z: torch.Tensor, y: torch.Tensor, alpha: float
) -> None:
    """Move each batch class's prototype toward its samples, in place (a center-loss update).

    v_k <- v_k - alpha * sum_{j: y_j = k} (v_k - z_j) / (1 + n_k); classes not in the batch
    stay put and alpha = 0 keeps the round-start means fixed.
    """
    counts = torch.bincount(y, minlength=prototypes.shape[0]).unsqueeze(1).to(prototypes.dtype)
    sums = torch.zeros_like(prototypes).index_add_(0, y, z)
    prototypes.sub_(alpha * (counts * prototypes - sums) / (1 + counts))
