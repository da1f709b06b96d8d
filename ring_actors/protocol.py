"""Typed messages that travel between clients, and their validation."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch


class PayloadError(ValueError):
    """A received payload is malformed or carries non-finite values."""


@dataclass(frozen=True, eq=False)
class Payload:
    """The shared part of a client's state, addressed by round and membership epoch.

    ``(sender, round, seq)`` identifies a delivery so duplicates from re-sends are dropped;
    ``epoch`` lets a receiver ignore messages from a membership that no longer exists.
    ``kind`` names the exchange channel (pushed state, offers, ring-lap tokens, a joiner's
    hand-off), so every exchange pattern uses the same transport; ``meta`` carries what a
    channel needs besides tensors (a lap's name, who has added to a token).
    """

    sender: int
    round: int
    epoch: int
    seq: int
    tensors: dict[str, torch.Tensor]
    num_samples: int = 0
    kind: str = "share"
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> tuple[int, int, int, str]:
        return (self.sender, self.round, self.seq, self.kind)

    @property
    def nbytes(self) -> int:
        """Bytes of tensor data carried: the communication cost of this hop."""
        return sum(t.numel() * t.element_size() for t in self.tensors.values())

    def validate(self, expected: dict[str, tuple[int, ...]] | None = None) -> None:
        """Raise :class:`PayloadError` unless every field is well-formed and every value finite.

        ``expected`` maps tensor names to shapes: what the receiver's method can merge. Without
        it (channels whose keys vary, such as lap tokens) only the values are checked.
        """
        if not isinstance(self.tensors, dict):
            raise PayloadError(f"payload from {self.sender}: tensors must be a dict")
        if expected is not None and not self.tensors:
            raise PayloadError(f"payload from {self.sender}: tensors must be a non-empty dict")
        if expected is not None:
            shapes = {
                k: tuple(v.shape) for k, v in self.tensors.items() if isinstance(v, torch.Tensor)
            }
            if shapes != expected:
                wrong = sorted(set(shapes) ^ set(expected)) or sorted(
                    k for k in shapes if shapes[k] != expected[k]
                )
                raise PayloadError(
                    f"payload from {self.sender}: tensors do not match this method's shared "
                    f"state (first differences: {wrong[:3]})"
                )
        for name, tensor in self.tensors.items():
            if not isinstance(tensor, torch.Tensor):
                raise PayloadError(f"payload from {self.sender}: {name!r} is not a tensor")
            if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                raise PayloadError(f"payload from {self.sender}: {name!r} has non-finite values")
        if self.round < 0 or self.num_samples < 0:
            raise PayloadError(f"payload from {self.sender}: negative round or sample count")

    def to(self, device: torch.device) -> Payload:
        """The same payload with its tensors on ``device``."""
        moved = {k: v.to(device, non_blocking=True) for k, v in self.tensors.items()}
        return Payload(
            self.sender,
            self.round,
            self.epoch,
            self.seq,
            moved,
            self.num_samples,
            self.kind,
            dict(self.meta),
        )


def detach_to_cpu(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Detached CPU copies, safe to ship through Ray while training continues."""
    return {k: v.detach().to("cpu", copy=True) for k, v in tensors.items()}
