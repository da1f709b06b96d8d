"""Payload tensors as raw bytes on their way between processes.

Pickling a torch tensor writes its storage into the pickle stream, and reading it back
copies it out again: a ResNet-18's 45 MB took about 150 ms a hop between two actors on one
node. A NumPy byte array is handed to Ray's serializer out of band instead: written once
into the object store and read back without a copy. The receiver then copies the bytes once
into tensors of its own, because the object store's buffer is shared and read-only, and
checks each piece's values are finite as it copies it, while the piece is still in the
cache: the values are read once on arrival, and what is refused on its size, its types or
its header is refused before a byte of it is copied.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import torch

from ring_actors.delivery.payloads import (
    SHAREABLE_DTYPES,
    Payload,
    PayloadError,
    mark_finite_on_arrival,
)

PIECE_BYTES = 2**19  # copied, then checked while it is still in the cache (L2 is 0.5-2 MiB)


@dataclass(frozen=True)
class WireTensor:
    """One tensor's bytes, with what it takes to rebuild it."""

    dtype: str  # a torch dtype's name, e.g. "float32"
    shape: tuple[int, ...]
    data: np.ndarray  # uint8, the tensor's elements in row-major order


@dataclass(frozen=True)
class WirePayload:
    """A payload as it travels: its fields, and its tensors as bytes."""

    shell: Payload  # the payload with no tensors
    tensors: dict[str, WireTensor]


def to_wire(payload: Payload) -> WirePayload:
    """The payload's tensors as byte arrays; they share memory with the tensors until sent."""
    wire = {name: _bytes_of(tensor) for name, tensor in payload.tensors.items()}
    return WirePayload(replace(payload, tensors={}), wire)


def from_wire(wire: WirePayload, max_bytes: int | None = None) -> Payload:
    """The payload with tensors of its own again, every value checked finite on the way.

    PayloadError for a header that is not well-formed, bytes that do not fit their type and
    shape, a type no method shares or more than ``max_bytes`` of tensors, all before a byte
    is copied; and for a non-finite value, found as it is copied.
    """
    if not isinstance(wire, WirePayload) or not isinstance(wire.tensors, dict):
        raise PayloadError(f"expected a WirePayload, got {type(wire).__name__}")
    if not isinstance(wire.shell, Payload):
        raise PayloadError(f"a wire payload's shell is a {type(wire.shell).__name__}")
    if wire.shell.tensors != {}:
        raise PayloadError("a wire payload's shell carries tensors of its own")
    wire.shell.validate()
    layouts = {name: _layout(name, value) for name, value in wire.tensors.items()}
    size = sum(layout[2] for layout in layouts.values())
    if max_bytes is not None and size > max_bytes:
        raise PayloadError(
            f"payload from {wire.shell.sender}: {size} bytes exceed the limit of {max_bytes}"
        )
    copies = {name: _copied(*layouts[name], wire.tensors[name].data) for name in layouts}
    if not _all_finite([e for _, extremes in copies.values() for e in extremes]):
        bad = next(name for name, (_, extremes) in copies.items() if not _all_finite(extremes))
        raise PayloadError(f"tensor {bad!r} has non-finite values")
    tensors = {name: tensor for name, (tensor, _) in copies.items()}
    return mark_finite_on_arrival(replace(wire.shell, tensors=tensors))


def _bytes_of(tensor: torch.Tensor) -> WireTensor:
    flat = tensor.detach().to("cpu").contiguous().reshape(-1)
    data = flat.view(torch.uint8).numpy() if flat.numel() else np.empty(0, np.uint8)
    return WireTensor(str(tensor.dtype).removeprefix("torch."), tuple(tensor.shape), data)


def _layout(name: str, wire: WireTensor) -> tuple[torch.dtype, tuple[int, ...], int]:
    """A tensor's type, shape and size in bytes, once its bytes are found to fit them."""
    dtype = getattr(torch, str(getattr(wire, "dtype", "")), None)
    if not isinstance(dtype, torch.dtype):
        raise PayloadError(f"tensor {name!r}: {getattr(wire, 'dtype', None)!r} is not a dtype")
    if dtype not in SHAREABLE_DTYPES:
        raise PayloadError(f"tensor {name!r} has unsupported type {wire.dtype}")
    shape, data = getattr(wire, "shape", None), getattr(wire, "data", None)
    if not isinstance(shape, tuple) or not all(isinstance(n, int) and n >= 0 for n in shape):
        raise PayloadError(f"tensor {name!r}: shape {shape!r} is not a tuple of sizes")
    size = math.prod(shape) * dtype.itemsize
    layout = (data.dtype, data.ndim, data.size) if isinstance(data, np.ndarray) else None
    if layout != (np.uint8, 1, size):  # one row of bytes, as many as the tensor holds
        raise PayloadError(f"tensor {name!r}: bytes do not fit {wire.dtype} {shape}")
    return dtype, shape, size


def _copied(
    dtype: torch.dtype, shape: tuple[int, ...], size: int, data: np.ndarray
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The bytes copied into a new tensor a piece at a time, with each floating-point piece's
    smallest and largest value, taken while it is in the cache (a NaN or an infinity is one
    of them)."""
    tensor = torch.empty(shape, dtype=dtype)
    extremes: list[torch.Tensor] = []
    if size == 0:
        return tensor, extremes
    values = tensor.view(-1)
    raw = values.view(torch.uint8).numpy()
    for low in range(0, size, PIECE_BYTES):
        high = min(low + PIECE_BYTES, size)
        np.copyto(raw[low:high], data[low:high])
        if dtype.is_floating_point:
            extremes.extend(torch.aminmax(values[low // dtype.itemsize : high // dtype.itemsize]))
    return tensor, extremes


def _all_finite(extremes: list[torch.Tensor]) -> bool:
    return not extremes or bool(torch.isfinite(torch.stack(extremes)).all())
