"""Lap contributions whose totals name their contributors: member ``m`` adds ``2**m``, so a
total is exactly the sum of the members summed into it."""

from __future__ import annotations

import torch

LAP, ROUND = "avg", 1
CHUNKED_SHAPE = (2, 5)  # in chunks: pieces of 2 to 4 elements, a shape to rebuild


def contribution(member: int, shape: tuple[int, ...] = (1,)) -> dict[str, torch.Tensor]:
    """Powers of two: a total names exactly the members summed into it. A chunked lap cuts
    a tensor of several elements into pieces that travel apart."""
    return {"x": torch.full(shape, float(2**member), dtype=torch.float64)}


def lap_value(total: dict[str, torch.Tensor]) -> float:
    """The one value every element of a total of ``contribution`` s holds."""
    x = total["x"]
    assert torch.all(x == x.reshape(-1)[0]), f"the elements of a total differ: {x}"
    return float(x.reshape(-1)[0])
