"""GENE-FL's building blocks as pure functions: Fisher mask, layer scores, gamma, clustering.

Kept apart from the client class so each piece can be checked on hand-made values.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from ring_actors.data.images import LabelledImages

_TINY = 1e-12


@contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Deterministic CPU initialisation without disturbing the global RNG."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def layer_groups(model: nn.Module) -> dict[str, tuple[str, ...]]:
    """Each parameter tensor (a "layer") with the state keys that travel with it.

    A BatchNorm weight carries the module's running mean and variance along.
    """
    groups = {name: (name,) for name, _ in model.named_parameters()}
    norms = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)
    for prefix, module in model.named_modules():
        if isinstance(module, norms) and module.affine and module.track_running_stats:
            at = f"{prefix}." if prefix else ""
            groups[f"{at}weight"] = (f"{at}weight", f"{at}running_mean", f"{at}running_var")
    return groups


def lap_scalars(total: dict[str, torch.Tensor]) -> dict[str, float]:
    """Every 0-dim entry of a lap total (weights, counts) as floats, in one device sync."""
    keys = [key for key, value in total.items() if value.dim() == 0]
    if not keys:
        return {}
    values = torch.stack([total[key].double() for key in keys]).cpu().tolist()
    return dict(zip(keys, values, strict=True))


def cluster_means(
    total: dict[str, torch.Tensor],
    weights: dict[str, float],
    k: int,
    groups: dict[str, tuple[str, ...]],
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Cluster ``k``'s per-layer means from a lap total, and the layers forming its learnGene.

    ``c{k}/{key}`` holds the weighted sum of a state entry; in ``weights`` (the total's
    scalars), ``c{k}/{layer}#n`` is the summed weight of that layer's contributors and
    ``c{k}/#w`` that of every contributor in the cluster. Returns (the mean of every layer
    with weight > 0, the mean of every layer a weighted majority of contributors selected).
    """
    weight_all = weights.get(f"c{k}/#w", 0.0)
    means: dict[str, torch.Tensor] = {}
    gene: dict[str, torch.Tensor] = {}
    if weight_all <= 0:
        return means, gene
    for name, keys in groups.items():
        weight = weights.get(f"c{k}/{name}#n", 0.0)
        if weight <= 0:
            continue
        values = {key: total[f"c{k}/{key}"] / weight for key in keys}
        means.update(values)
        if 2 * weight > weight_all:
            gene.update(values)
    return means, gene


def diagonal_fisher(
    model: nn.Module,
    params: dict[str, nn.Parameter],
    batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
) -> dict[str, torch.Tensor]:
    """Empirical diagonal Fisher: the mean over batches of the squared gradient of the CE loss.

    With batches of one sample this is the exact per-sample estimator; larger batches give
    the cheaper squared-minibatch-gradient approximation. Run in eval mode, so BatchNorm uses
    (and does not update) its running statistics.
    """
    was_training = model.training
    model.eval()
    sums = {name: torch.zeros_like(p) for name, p in params.items()}
    count = 0
    for x, y in batches:
        loss = F.cross_entropy(model(x), y)
        grads = torch.autograd.grad(loss, list(params.values()), allow_unused=True)
        for total, grad in zip(sums.values(), grads, strict=True):
            if grad is not None:
                total.add_(grad.square())
        count += 1
    model.train(was_training)
    return {name: total / max(1, count) for name, total in sums.items()}


def min_max(values: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Each tensor min-max normalised by the global min and max over all tensors (no sync)."""
    lo = torch.stack([v.min() for v in values.values()]).min()
    hi = torch.stack([v.max() for v in values.values()]).max()
    span = (hi - lo).clamp_min(_TINY)  # a constant Fisher normalises to 0: nothing masked
    return {name: (v - lo) / span for name, v in values.items()}


def fisher_mask(fisher: dict[str, torch.Tensor], epsilon: float) -> dict[str, torch.Tensor]:
    """Boolean masks of the high-Fisher entries (normalised Fisher > epsilon)."""
    return {name: v > epsilon for name, v in min_max(fisher).items()}


def layer_scores(new: Sequence[torch.Tensor], old: Sequence[torch.Tensor]) -> torch.Tensor:
    """Per-layer sensitivity cos(new, old) / numel, normalised to sum to one.

    The normaliser is the sum of absolute values, which equals the plain sum whenever every
    cosine is non-negative (the usual case) and keeps the ranking intact otherwise.
    """
    raw = torch.stack(
        [
            F.cosine_similarity(a.detach().flatten().float(), b.flatten().float(), dim=0)
            / a.numel()
            for a, b in zip(new, old, strict=True)
        ]
    )
    return raw / raw.abs().sum().clamp_min(_TINY)


def top_layers(scores: Sequence[float], gamma: int) -> list[int]:
    """Indices of the ``gamma`` largest scores, ties broken by the lower index."""
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    return sorted(order[:gamma])


def gamma_floor(sizes: Sequence[int], fraction: float) -> int:
    """The fewest layers whose smallest members hold at least ``fraction`` of all parameters.

    The score divides by the layer size, so the selected layers are, in practice, the
    smallest ones: this floor fixes the learnGene's steady-state size. It never reaches the
    whole model: in a small CNN one layer can hold over 80% of the parameters, and a floor of
    every layer would turn GENE-FL into clustered FedAvg, so the largest layer stays personal.
    """
    total, held = sum(sizes), 0
    ceiling = max(1, len(sizes) - 1)
    for count, size in enumerate(sorted(sizes), start=1):
        held += size
        if held >= fraction * total:
            return min(count, ceiling)
    return ceiling


def next_gamma(
    gamma: int, best: float, acc: float, gamma_min: int, delta: float
) -> tuple[int, float]:
    """One step of the shared schedule: shrink by one layer unless accuracy fell > delta.

    Returns the new (gamma, best accuracy so far).
    """
    if acc >= best - delta:
        gamma = max(gamma - 1, gamma_min)
    return gamma, max(best, acc)


def takes_part(shared_seed: int, round_: int, identity: int, rate: float) -> bool:
    """A Bernoulli(rate) draw seeded by the run, the round and the client's own seed."""
    if rate >= 1.0:
        return True
    return bool(np.random.default_rng([shared_seed, round_, identity]).random() < rate)


@torch.no_grad()
def data_signature(
    data: LabelledImages, rank: int, max_samples: int, generator: torch.Generator
) -> torch.Tensor:
    """Flattened top-``rank`` left singular vectors of the (features x samples) data matrix.

    Columns are normalised images (a seeded subsample of at most ``max_samples``), so the
    vectors live in feature space and compare across clients; each vector's sign is fixed by
    making its largest-magnitude entry positive. Returns a CPU float32 vector.
    """
    n = len(data)
    x = data.x
    if n > max_samples:
        x = x[torch.randperm(n, generator=generator)[:max_samples].to(data.device)]
    rows = data.normalise(x).flatten(1)  # (samples, features): its Vh holds U of the transpose
    _, _, vh = torch.linalg.svd(rows, full_matrices=False)
    u = torch.zeros(rank, rows.shape[1], device=rows.device)
    u[: min(rank, vh.shape[0])] = vh[:rank]
    pivot = u.abs().argmax(1, keepdim=True)
    signs = torch.where(u.gather(1, pivot) < 0, -1.0, 1.0)
    return (u * signs).flatten().cpu()


def _square_distances(points: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """(points, centroids) squared distances, summed element-wise: the same on any BLAS."""
    return np.stack([((points - c) ** 2).sum(axis=1) for c in centroids], axis=1)


def kmeans(
    points: np.ndarray, k: int, seed: int, iterations: int = 100
) -> tuple[np.ndarray, np.ndarray]:
    """Seeded k-means++ then Lloyd iterations; returns (labels, centroids).

    Deterministic for identical inputs, so every client clusters the all-gathered
    signatures identically without a coordinator. An empty cluster keeps its centroid.
    """
    rng = np.random.default_rng(seed)
    n = len(points)
    chosen = [points[rng.integers(n)]]
    for _ in range(1, k):
        d2 = _square_distances(points, np.stack(chosen)).min(axis=1)
        total = d2.sum()
        index = rng.integers(n) if total <= 0 else rng.choice(n, p=d2 / total)
        chosen.append(points[index])
    centroids = np.stack(chosen).astype(np.float64)
    labels = np.full(n, -1)
    for _ in range(iterations):
        new = _square_distances(points, centroids).argmin(axis=1)
        if np.array_equal(new, labels):
            break
        labels = new
        for j in range(k):
            if (labels == j).any():
                centroids[j] = points[labels == j].mean(axis=0)
    return labels, centroids


def nearest(signature: torch.Tensor, centroids: torch.Tensor) -> int:
    """Index of the centroid closest (Euclidean) to ``signature``."""
    return int((centroids - signature.to(centroids.device)).square().sum(1).argmin())
