"""What torch calls made while a block ran: how a test sees that a hot path allocates no
tensor as large as its input, or converts nothing to float64."""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode


class TensorsMade(TorchFunctionMode):
    """Every tensor a torch call returns while active."""

    def __init__(self) -> None:
        super().__init__()
        self.made: list[torch.Tensor] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        results = result if isinstance(result, tuple) else (result,)
        self.made += [r for r in results if isinstance(r, torch.Tensor)]
        return result
