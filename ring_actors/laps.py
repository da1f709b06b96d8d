"""The ring lap's arithmetic: a token is a dict of tensors summed key by key."""

from __future__ import annotations

import torch


def accumulate(total: dict[str, torch.Tensor], contribution: dict[str, torch.Tensor]) -> None:
    """Add ``contribution`` into ``total`` in place; a key not yet in ``total`` is inserted.

    Summing is what makes the lap exact (weights count only what was added); inserting makes
    the same token an all-gather when contributors use disjoint keys.
    """
    for key, value in contribution.items():
        value = value.detach().to("cpu")
        if key in total:
            total[key] = total[key] + value
        else:
            total[key] = value.clone()
