"""What a receiver checks of a payload beyond its own well-formedness: that it fits this
receiver's method (names, shapes and dtypes, per channel), this run's rounds, this
receiver's epoch, and a size derived from the model.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import torch

from ring_actors.delivery.payloads import Channel, Payload, PayloadError

TensorSpec = tuple[tuple[int, ...], torch.dtype]
HEADROOM_BYTES = 2**20  # what a payload may carry beyond its tensors' sizes (small counters)


def specs(tensors: Mapping[str, torch.Tensor]) -> dict[str, TensorSpec]:
    return {k: (tuple(v.shape), v.dtype) for k, v in tensors.items()}


def tensor_bytes(tensors: Mapping[str, torch.Tensor]) -> int:
    return sum(v.numel() * v.element_size() for v in tensors.values())


def derived_limit(model_bytes: int, members: int) -> int:
    """The largest payload a method of ``model_bytes`` can send: a lap token that gathers
    every member's full model (disjoint keys), plus headroom."""
    return (members + 1) * model_bytes + HEADROOM_BYTES


def model_bytes(algorithm: object, *states: Mapping[str, torch.Tensor]) -> int:
    """Bytes of the largest of the method's modules' states and ``states``."""
    sizes = [tensor_bytes(s) for s in states]
    for value in vars(algorithm).values():
        if isinstance(value, torch.nn.Module):
            sizes.append(tensor_bytes(value.state_dict()))
    return max(sizes, default=0)


def check_tensors(
    payload: Payload, expected: Mapping[str, TensorSpec], keys: tuple[str, ...] | None = None
) -> None:
    """Exactly the names ``keys`` (all of ``expected`` when None), each of the receiver's
    shape and dtype: a tensor that would broadcast or be cast is refused."""
    wanted = set(expected if keys is None else keys)
    if set(payload.tensors) != wanted:
        wrong = sorted(set(payload.tensors) ^ wanted)
        raise PayloadError(
            f"{_who(payload)}: tensors do not match (first differences: {wrong[:3]})"
        )
    _check_specs(payload, expected, payload.tensors)


def check_known_tensors(payload: Payload, expected: Mapping[str, TensorSpec]) -> None:
    """Each tensor whose name the receiver also holds, of the receiver's shape and dtype.

    A hand-off's names follow the sender's state (GENE-FL hands over its cluster's
    learnGene, named after the cluster), so they are not required to match; a tensor the
    receiver would copy into one of its own is.
    """
    _check_specs(payload, expected, [name for name in payload.tensors if name in expected])


def _check_specs(
    payload: Payload, expected: Mapping[str, TensorSpec], names: Iterable[str]
) -> None:
    for name in names:
        tensor = payload.tensors[name]
        if (tuple(tensor.shape), tensor.dtype) != expected[name]:
            shape, dtype = expected[name]
            raise PayloadError(
                f"{_who(payload)}: {name!r} is {tuple(tensor.shape)} {tensor.dtype}, "
                f"this method's is {shape} {dtype}"
            )


def _who(payload: Payload) -> str:
    return f"{payload.channel.value} payload from {payload.sender}"


@dataclass(frozen=True)
class Bounds:
    """How far a payload's counters may be from the receiver's."""

    rounds: int  # the run's rounds: no payload belongs to a round past them
    epoch_lead: int  # membership changes a sender's view may be ahead of ours

    def check(self, payload: Payload, epoch: int) -> None:
        who = f"{payload.channel.value} payload from {payload.sender}"
        if payload.round > self.rounds:
            raise PayloadError(f"{who}: round {payload.round} is past the run's {self.rounds}")
        epochs = [payload.epoch] + ([payload.lap.epoch] if payload.lap else [])
        if max(epochs) > epoch + self.epoch_lead:
            raise PayloadError(
                f"{who}: epoch {max(epochs)} is more than {self.epoch_lead} ahead of ours ({epoch})"
            )
        if payload.lap and payload.lap.attempt > payload.round + self.rounds + self.epoch_lead:
            raise PayloadError(f"{who}: lap attempt {payload.lap.attempt} is implausible")


def expected_for(
    channel: Channel, share: Mapping[str, TensorSpec], init: Mapping[str, TensorSpec]
) -> Mapping[str, TensorSpec] | None:
    """What a channel's tensors must be on receipt; None where they vary (lap tokens are
    checked against the contribution they are added to)."""
    if channel == Channel.SHARE:
        return share
    if channel == Channel.INIT:
        return init
    return None
