"""A lap's arithmetic: contributions added into a total in place, refused when they would
broadcast or cast, and one checksum that tells two members' totals apart."""

from __future__ import annotations

import torch


def mismatch(total: dict[str, torch.Tensor], contribution: dict[str, torch.Tensor]) -> str | None:
    """The first key both hold with another shape or dtype (adding them would broadcast or
    cast silently), described; None when they fit."""
    for key, value in contribution.items():
        held = total.get(key)
        if held is not None and (held.shape, held.dtype) != (value.shape, value.dtype):
            return (
                f"{key!r} is {tuple(held.shape)} {held.dtype} in the token, "
                f"{tuple(value.shape)} {value.dtype} here"
            )
    return None


def accumulate(total: dict[str, torch.Tensor], contribution: dict[str, torch.Tensor]) -> None:
    """Add ``contribution`` into ``total``'s tensors in place, on their device (a key not yet
    in ``total`` is inserted, copied to host memory, where a token travels from), or change
    nothing if it does not fit. Summing is what makes the lap exact (weights count only what
    was added); inserting makes the same token an all-gather when contributors use disjoint
    keys."""
    wrong = mismatch(total, contribution)
    if wrong is not None:
        raise ValueError(f"lap contribution does not fit the total: {wrong}")
    for key, value in contribution.items():
        held, value = total.get(key), value.detach()
        if held is None:
            total[key] = value.to("cpu", copy=True)
        elif held.is_contiguous() and not held.requires_grad:  # no element shares memory
            held.add_(value.to(held.device))
        else:
            total[key] = held + value.to(held.device)


def lap_checksum(total: dict[str, torch.Tensor]) -> float:
    """One number that differs when two members applied different totals; linear, so a
    total's is the sum of its contributions'. Summed with no copy, in each tensor's own type
    (half types in float32, integers in int64), in float64 only past that type's range."""

    def summed(t: torch.Tensor) -> float:
        if t.is_floating_point():
            value = float(t.sum(dtype=torch.float32 if t.element_size() < 4 else t.dtype))
            return value if abs(value) < float("inf") else float(t.sum(dtype=torch.float64))
        bounded = t.dtype == torch.bool or t.numel() == 0
        fits = bounded or max(abs(int(v)) for v in torch.aminmax(t)) * t.numel() < 2**63
        return float(t.sum(dtype=torch.int64 if fits else torch.float64))

    return float(sum(summed(t) for t in total.values()))
