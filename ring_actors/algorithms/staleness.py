"""Staleness-aware averaging: an old state counts less, as in FedAsync.

A state a client published after round ``r``, merged at the start of round ``t``, is
``s = max(0, t - 1 - r)`` rounds old (round ``t - 1`` is the freshest it could be). It is
weighted ``(1 + s) ** -a``; the receiver's own state weighs 1. ``a = 0`` weighs every state
alike: the plain average.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def staleness(current_round: int, sent_round: int) -> int:
    """Rounds a state sent after ``sent_round`` is behind, merged in ``current_round``."""
    return max(0, current_round - 1 - sent_round)


def staleness_weights(
    current_round: int, sent_rounds: Sequence[int], exponent: float
) -> list[float]:
    """``(1 + s) ** -exponent`` for each received state."""
    return [(1.0 + staleness(current_round, r)) ** -exponent for r in sent_rounds]


def weighted_average(
    own: torch.Tensor | None,
    incoming: Sequence[torch.Tensor],
    weights: Sequence[float],
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """The average of ``own`` (weight 1, when given) and ``incoming`` with ``weights``, summed
    into ``out``: a new tensor when None, ``own`` itself for a merge in place. One pass per
    state and no tensor the size of the model allocated per merge: a stack of copies made a
    ``cnn`` merge five times slower, and a new tensor made a ResNet-18 merge over twice slower."""
    values = list(incoming) if own is None else [own, *incoming]
    w = list(weights) if own is None else [1.0, *weights]
    if out is None:
        out = values[0] * w[0]
    else:
        out.copy_(values[0])  # nothing to copy where ``out`` is ``own``
        if w[0] != 1.0:
            out.mul_(w[0])
    for value, weight in zip(values[1:], w[1:], strict=True):
        out.add_(value, alpha=weight)
    return out.div_(sum(w))
