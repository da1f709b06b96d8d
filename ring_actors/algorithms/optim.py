"""SGD and Adam with torch.optim's update rules, without torch.optim's import cost.

The first ``step`` of a ``torch.optim`` optimizer imports torch's compiler stack (dynamo,
sympy): about 80 MB of private memory in every client process, for a compiler no client uses.
Many clients share a node, so the methods use these instead; tests hold them to torch.optim's
trajectories.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch


class _Optimizer:
    """Parameter groups as torch.optim keeps them (``param_groups[i]["lr"]`` may be changed)."""

    def __init__(self, params: Iterable[torch.Tensor], **defaults: Any) -> None:
        self.param_groups: list[dict[str, Any]] = [{"params": list(params), **defaults}]
        self.state: dict[torch.Tensor, dict[str, Any]] = {}

    def zero_grad(self, set_to_none: bool = True) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if set_to_none:
                    p.grad = None
                elif p.grad is not None:
                    p.grad.zero_()

    def _with_grads(self) -> Iterable[tuple[dict[str, Any], torch.Tensor, dict[str, Any]]]:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    yield group, p, self.state.setdefault(p, {})


class SGD(_Optimizer):
    """torch.optim.SGD: L2 weight decay, heavy-ball momentum (no dampening, not Nesterov)."""

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        lr: float,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__(params, lr=lr, momentum=momentum, weight_decay=weight_decay)

    @torch.no_grad()
    def step(self) -> None:
        for group, p, state in self._with_grads():
            d_p = p.grad
            if group["weight_decay"]:
                d_p = d_p.add(p, alpha=group["weight_decay"])
            if group["momentum"]:
                buf = state.get("momentum_buffer")
                if buf is None:
                    buf = state["momentum_buffer"] = d_p.clone()
                else:
                    buf.mul_(group["momentum"]).add_(d_p)
                d_p = buf
            p.add_(d_p, alpha=-group["lr"])


class Adam(_Optimizer):
    """torch.optim.Adam: L2 weight decay added to the gradient, bias-corrected moments."""

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)

    @torch.no_grad()
    def step(self) -> None:
        for group, p, state in self._with_grads():
            beta1, beta2 = group["betas"]
            grad = p.grad
            if group["weight_decay"]:
                grad = grad.add(p, alpha=group["weight_decay"])
            if not state:
                state.update(step=0, m=torch.zeros_like(p), v=torch.zeros_like(p))
            state["step"] += 1
            m, v, t = state["m"], state["v"], state["step"]
            m.lerp_(grad, 1 - beta1)
            v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            denom = (v.sqrt() / (1 - beta2**t) ** 0.5).add_(group["eps"])
            p.addcdiv_(m, denom, value=-group["lr"] / (1 - beta1**t))
