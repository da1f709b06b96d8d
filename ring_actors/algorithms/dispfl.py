"""DisPFL (Dai et al., ICML 2022): personalised sparse masks, masked models pushed to neighbours.

Each client owns a binary mask over the weights of its convolutional and linear layers, drawn
once from its own seed at a fixed overall ``density`` (Erdős–Rényi-kernel layer densities, or
the same density everywhere), and trains only the weights its mask keeps. A round:

1. **merge**: every weight is averaged over the senders whose masks include it (self
   included), then the own mask is applied again; unmasked tensors (biases, normalisation
   layers) are plain means.
2. **train**: local epochs with masked gradients; inactive weights stay at zero.
3. **mask update** (every ``mask_every`` rounds): in each layer the ``rate * active`` active
   weights of smallest magnitude are pruned and as many inactive ones regrown, at random
   (the official scripts' choice) or by largest gradient magnitude, with the cosine-annealed
   ``rate = anneal_factor / 2 * (1 + cos(pi * t / anneal_rounds))``. The count per layer, and
   so the density, never changes.
4. **push** the active values and the bit-packed mask: about ``density * 4 + 1/8`` bytes per
   masked weight instead of 4.

Simplifications at small scale: the gradient regrowth scores use one training batch, not a
pass over the data; regrown weights start at zero and may include weights pruned in the same
update; ``t`` counts this client's own rounds, so a late joiner's schedule starts afresh; the
neighbours are the runtime's topology rather than DisPFL's random peer sampling. A newcomer
keeps its own mask and takes its predecessor's values wherever that mask covers them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch.nn import functional as F

from ring_actors.algorithms.base import AlgorithmOptions, TaskSpec
from ring_actors.algorithms.supervised import SupervisedAlgorithm
from ring_actors.data.images import LabelledImages
from ring_actors.delivery.payloads import Payload

MASK = "#mask"  # suffix of the key holding a layer's bit-packed mask
BITS = torch.tensor([1, 2, 4, 8, 16, 32, 64, 128], dtype=torch.uint8)


@dataclass(frozen=True)
class DisPFLOptions(AlgorithmOptions):
    """Defaults of the official scripts: density 0.5, ERK masks, random regrowth, factor 0.5."""

    density: float = 0.5
    mask_init: Literal["erk", "uniform"] = "erk"
    regrow: Literal["random", "gradient"] = "random"
    anneal_factor: float = 0.5
    anneal_rounds: int = 300  # T of the cosine schedule: the paper anneals over the whole run
    mask_every: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 < self.density <= 1:
            raise ValueError(f"density: must be in (0, 1], got {self.density}")
        if not 0 <= self.anneal_factor <= 1:
            raise ValueError(f"anneal_factor: must be in [0, 1], got {self.anneal_factor}")
        for name in ("anneal_rounds", "mask_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be an integer >= 1, got {getattr(self, name)}")


def erk_densities(shapes: dict[str, tuple[int, ...]], density: float) -> dict[str, float]:
    """Erdős–Rényi-kernel densities: ``eps * sum(shape) / prod(shape)`` per layer, capped at 1.

    ``eps`` is chosen so the layers keep ``density`` of their weights in all; a layer whose
    share would exceed 1 is made dense and the rest is solved again.
    """
    numel = {name: math.prod(shape) for name, shape in shapes.items()}
    budget = density * sum(numel.values())
    dense: list[str] = []
    eps, raw = 0.0, {}
    while True:
        rest = [name for name in shapes if name not in dense]
        if not rest:
            break
        raw = {name: sum(shapes[name]) / numel[name] for name in rest}
        left = budget - sum(numel[name] for name in dense)
        eps = left / sum(raw[name] * numel[name] for name in rest)
        over = [name for name in rest if eps * raw[name] > 1]
        if not over:
            break
        dense += over  # eps only grows as layers turn dense, so they stay over 1
    return {name: 1.0 if name in dense else eps * raw[name] for name in shapes}


def random_mask(shape: tuple[int, ...], density: float, generator: torch.Generator) -> torch.Tensor:
    """A boolean mask keeping ``round(density * numel)`` (at least one) positions at random."""
    numel = math.prod(shape)
    keep = min(numel, max(1, round(density * numel)))
    mask = torch.zeros(numel, dtype=torch.bool)
    mask[torch.randperm(numel, generator=generator)[:keep]] = True
    return mask.view(shape)


def pack_bits(mask: torch.Tensor) -> torch.Tensor:
    """Eight mask entries per byte (least significant bit first), zero-padded at the end."""
    flat = mask.flatten().to(torch.uint8)
    flat = torch.cat([flat, flat.new_zeros(-flat.numel() % 8)])
    return (flat.view(-1, 8) * BITS.to(flat.device)).sum(1, dtype=torch.uint8)


def unpack_bits(packed: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """The boolean mask of ``shape`` that ``pack_bits`` packed."""
    bits = packed.unsqueeze(1).bitwise_and(BITS.to(packed.device)) > 0
    return bits.flatten()[: math.prod(shape)].view(shape)


def prune_and_regrow(
    weight: torch.Tensor, mask: torch.Tensor, rate: float, scores: torch.Tensor
) -> torch.Tensor:
    """A new mask: the ``int(rate * active)`` smallest-magnitude active weights dropped and as
    many positions inactive after the drop revived, those with the largest ``scores``."""
    flat = mask.flatten()
    count = int(rate * int(flat.sum()))
    if count == 0:
        return mask.clone()
    magnitude = weight.detach().abs().flatten().masked_fill(~flat, math.inf)
    new = flat.clone()
    new[magnitude.topk(count, largest=False).indices] = False
    revived = scores.flatten().masked_fill(new, -math.inf).topk(count).indices
    new[revived] = True
    return new.view_as(mask)


class DisPFL(SupervisedAlgorithm):
    """Personal sparse masks; masked models are averaged where the senders' masks overlap."""

    Options = DisPFLOptions
    options: DisPFLOptions

    def __init__(self, options: DisPFLOptions, task: TaskSpec) -> None:
        super().__init__(options, task)
        shapes = {name: tuple(p.shape) for name, p in self.model.named_parameters() if p.dim() > 1}
        if options.mask_init == "erk":
            densities = erk_densities(shapes, options.density)
        else:
            densities = {name: options.density for name in shapes}
        # The client's own seed: every client starts from its own mask.
        self.masks = {
            name: random_mask(shape, densities[name], self.generator).to(self.device)
            for name, shape in shapes.items()
        }
        self.rounds_trained = 0
        self._apply_masks()

    # ---- training ------------------------------------------------------------------------

    def train_round(self, data: LabelledImages) -> dict[str, float]:
        metrics = super().train_round(data)
        changed = 0.0
        if (self.rounds_trained + 1) % self.options.mask_every == 0:
            changed = self._update_masks(data, self.anneal_rate(self.rounds_trained))
        self.rounds_trained += 1
        return {**metrics, "mask_changed": changed}

    def step(self) -> None:
        """Only the masked weights move: gradients and the weights outside the mask stay zero."""
        self._mask_gradients()
        self.optimizer.step()
        self._apply_masks()

    def anneal_rate(self, round_: int) -> float:
        """The fraction of active weights pruned (and regrown) after round ``round_``."""
        opts = self.options
        progress = min(round_, opts.anneal_rounds) / opts.anneal_rounds
        return opts.anneal_factor / 2 * (1 + math.cos(math.pi * progress))

    def _update_masks(self, data: LabelledImages, rate: float) -> float:
        """Prune and regrow every mask; the fraction of masked positions that changed."""
        scores = self._regrow_scores(data)
        params = dict(self.model.named_parameters())
        changed = 0
        for name, mask in self.masks.items():
            new = prune_and_regrow(params[name], mask, rate, scores[name])
            changed += int((new != mask).sum())
            self.masks[name] = new
        self._apply_masks()  # regrown weights start at zero
        return changed / sum(m.numel() for m in self.masks.values())

    def _regrow_scores(self, data: LabelledImages) -> dict[str, torch.Tensor]:
        """Random scores, or the gradient magnitudes of the dense weights on one batch."""
        if self.options.regrow == "random":
            return {
                name: torch.rand(mask.shape, generator=self.generator).to(self.device)
                for name, mask in self.masks.items()
            }
        x, y = next(data.batches(self.task.batch_size, generator=self.generator))
        self.optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(self.model(x), y).backward()
        params = dict(self.model.named_parameters())
        scores = {name: params[name].grad.detach().abs() for name in self.masks}
        self.optimizer.zero_grad(set_to_none=True)
        return scores

    def _mask_gradients(self) -> None:
        for name, p in self.model.named_parameters():
            if name in self.masks and p.grad is not None:
                p.grad.mul_(self.masks[name])

    @torch.no_grad()
    def _apply_masks(self) -> None:
        for name, p in self.model.named_parameters():
            if name in self.masks:
                p.mul_(self.masks[name])

    # ---- exchange ------------------------------------------------------------------------

    def shared_state(self) -> dict[str, torch.Tensor]:
        """Active values and packed masks of the masked layers; other real tensors whole."""
        out = {}
        for name, value in self.model.state_dict().items():
            if not value.is_floating_point():
                continue  # BatchNorm's batch counter stays local
            mask = self.masks.get(name)
            if mask is None:
                out[name] = value
            else:
                out[name] = value[mask]
                out[name + MASK] = pack_bits(mask)
        return out

    def merge(self, received: list[Payload]) -> None:
        if received:
            self._combine([p.tensors for p in received], keep_self=True)

    def set_shared(self, tensors: dict[str, torch.Tensor]) -> None:
        """A newcomer keeps its mask and takes the sender's values wherever that covers it."""
        missing = set(self.shared_state()) - set(tensors)
        if missing:
            raise KeyError(f"received state lacks {sorted(missing)}")
        self._combine([tensors], keep_self=False)

    @torch.no_grad()
    def _combine(self, sources: list[dict[str, torch.Tensor]], keep_self: bool) -> None:
        """Each weight the mean over the sources (and self) covering it, own mask reapplied;
        a weight nobody covers keeps its value."""
        for name, value in self.model.state_dict().items():
            if not value.is_floating_point():
                continue
            mask = self.masks.get(name)
            total, count = torch.zeros_like(value), torch.zeros_like(value)
            if keep_self:
                total += value
                count += 1 if mask is None else mask
            for tensors in sources:
                dense, cover = self._dense(tensors, name, value)
                total += dense
                count += cover
            mixed = torch.where(count > 0, total / count.clamp(min=1), value)
            value.copy_(mixed if mask is None else mixed * mask)

    def _dense(
        self, tensors: dict[str, torch.Tensor], name: str, like: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A sender's tensor ``name`` scattered back to full shape, and where it has values."""
        values = tensors[name].to(like)
        if name not in self.masks:
            return values, torch.ones_like(like)
        cover = unpack_bits(tensors[name + MASK].to(like.device), tuple(like.shape))
        if int(cover.sum()) != values.numel():
            raise ValueError(
                f"{name}: the mask keeps {int(cover.sum())} weights, not {values.numel()}"
            )
        dense = torch.zeros_like(like)
        dense[cover] = values
        return dense, cover.to(like.dtype)
