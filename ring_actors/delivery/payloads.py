"""Typed messages that travel between clients, and their validation."""

from __future__ import annotations

import enum
import threading
import weakref
from dataclasses import dataclass, replace

import torch


class PayloadError(ValueError):
    """A received payload is malformed or carries non-finite values."""


class Channel(str, enum.Enum):
    """The exchange a payload belongs to; every one travels the same acknowledged path."""

    SHARE = "share"  # shared state (or an offer) pushed to out-neighbours after a round
    PULLED = "pulled"  # the part of a published state a peer asked for
    INIT = "init"  # a predecessor's hand-off to a client that joins the ring
    LAP = "lap"  # a ring-lap token collecting contributions
    LAP_RESULT = "lap_result"  # a finished lap's total, handed round the ring


LAP_CHANNELS = (Channel.LAP, Channel.LAP_RESULT)

# Tensor types a method may share: real numbers and counters. Anything else (complex,
# quantised, sparse, meta) is refused before it reaches a method.
SHAREABLE_DTYPES = frozenset(
    {
        torch.float16,
        torch.bfloat16,
        torch.float32,
        torch.float64,
        torch.int64,
        torch.int32,
        torch.int16,
        torch.int8,
        torch.uint8,
        torch.bool,
    }
)


@dataclass(frozen=True)
class LapHeader:
    """Where a lap token has been: its lap, the attempt's leader, who added, who forwarded.

    ``epoch`` is the membership epoch the attempt was started in; a token of an epoch that
    no longer exists is dropped instead of circulating.
    """

    name: str
    leader: int
    attempt: int
    epoch: int
    visited: tuple[int, ...] = ()
    contributors: tuple[int, ...] = ()
    # A chunked lap's message (client/chunked_lap.py): the chunk of the total it carries
    # (-1: a whole total), the all-reduce step it was sent at, and the full shape of each
    # tensor its pieces were cut from (checked by the chunked lap itself).
    chunk: int = -1
    step: int = 0
    shapes: tuple[tuple[str, tuple[int, ...]], ...] = ()

    def validate(self, who: str) -> None:
        """Raise :class:`PayloadError` unless every field has its type (ids >= 0)."""
        if not isinstance(self.name, str):
            raise PayloadError(f"{who}: lap name must be a string, got {self.name!r}")
        for name in ("leader", "attempt", "epoch"):
            if not _count(getattr(self, name)):
                raise PayloadError(f"{who}: lap {name} must be an int >= 0")
        for name in ("visited", "contributors"):
            ids = getattr(self, name)
            if not isinstance(ids, tuple) or not all(_count(i) for i in ids):
                raise PayloadError(f"{who}: lap {name} must be a tuple of client ids")


@dataclass(frozen=True, eq=False)
class Payload:
    """The shared part of a client's state, addressed by round and membership epoch.

    ``(sender, round, seq, channel, lap)`` identifies a delivery so duplicates from re-sends
    are dropped; ``epoch`` lets a receiver ignore messages from a membership that no longer
    exists; ``lap`` is the header of a ring-lap token (None on every other channel).
    """

    sender: int
    round: int
    epoch: int
    seq: int
    tensors: dict[str, torch.Tensor]
    num_samples: int = 0
    channel: Channel = Channel.SHARE
    lap: LapHeader | None = None

    @property
    def key(self) -> tuple[int, int, int, str, str]:
        """A lap token's ``seq`` is its leader's attempt, which every new leader counts from
        0: its leader and epoch tell a new leader's token from an old one's."""
        lap = f"{self.lap.name}@{self.lap.leader}/{self.lap.epoch}" if self.lap else ""
        return (self.sender, self.round, self.seq, self.channel, lap)

    @property
    def nbytes(self) -> int:
        """Bytes of tensor data carried: the communication cost of this hop."""
        return sum(t.numel() * t.element_size() for t in self.tensors.values())

    @property
    def storage_nbytes(self) -> int:
        """Bytes of the storages behind the tensors: what travels and is held (a small
        view of a large tensor carries all of it), each storage counted once."""
        storages = {}
        for t in self.tensors.values():
            storage = t.untyped_storage()
            storages[(storage.data_ptr(), t.device)] = storage.nbytes()
        return sum(storages.values())

    def validate(
        self, expected: dict[str, tuple[int, ...]] | None = None, max_bytes: int | None = None
    ) -> None:
        """Raise :class:`PayloadError` unless every field is well-formed and every value finite.

        ``expected`` maps tensor names to shapes: what the receiver's method can merge. Without
        it (channels whose keys vary, such as lap tokens) only the values are checked.
        ``max_bytes`` refuses an oversized payload before any of its values is looked at.
        """
        who = f"payload from {self.sender!r}"
        for name in ("sender", "round", "epoch", "seq", "num_samples"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise PayloadError(f"{who}: {name} must be an integer, got {value!r}")
        if self.round < 0 or self.num_samples < 0:
            raise PayloadError(f"{who}: negative round or sample count")
        if not isinstance(self.channel, Channel):
            raise PayloadError(f"{who}: unknown channel {self.channel!r}")
        if (self.channel in LAP_CHANNELS) != isinstance(self.lap, LapHeader):
            raise PayloadError(f"{who}: a lap header belongs on lap channels only")
        if self.lap is not None:
            self.lap.validate(who)
        if not isinstance(self.tensors, dict):
            raise PayloadError(f"{who}: tensors must be a dict")
        for name, tensor in self.tensors.items():
            if not isinstance(tensor, torch.Tensor):
                raise PayloadError(f"{who}: {name!r} is not a tensor")
            if tensor.dtype not in SHAREABLE_DTYPES or tensor.layout != torch.strided:
                raise PayloadError(f"{who}: {name!r} has unsupported type {tensor.dtype}")
        if max_bytes is not None and self.storage_nbytes > max_bytes:
            raise PayloadError(
                f"{who}: {self.storage_nbytes} bytes exceed the limit of {max_bytes}"
            )
        if expected is not None and not self.tensors:
            raise PayloadError(f"{who}: tensors must be a non-empty dict")
        if expected is not None:
            shapes = {k: tuple(v.shape) for k, v in self.tensors.items()}
            if shapes != expected:
                wrong = sorted(set(shapes) ^ set(expected)) or sorted(
                    k for k in shapes if shapes[k] != expected[k]
                )
                raise PayloadError(
                    f"{who}: tensors do not match this method's shared state "
                    f"(first differences: {wrong[:3]})"
                )
        if not _checked_on_arrival(self):
            for name, tensor in self.tensors.items():
                if not finite(tensor):
                    raise PayloadError(f"{who}: {name!r} has non-finite values")

    def to(self, device: torch.device) -> Payload:
        """The same payload with its tensors on ``device``."""
        moved = {k: v.to(device, non_blocking=True) for k, v in self.tensors.items()}
        return replace(self, tensors=moved)


def _count(value: object) -> bool:
    """An int >= 0 (a bool is not one)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def detach_to_cpu(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Detached CPU copies, safe to ship through Ray while training continues."""
    return {k: v.detach().to("cpu", copy=True) for k, v in tensors.items()}


def cpu_snapshots(*states: dict[str, torch.Tensor]) -> list[dict[str, torch.Tensor]]:
    """Detached CPU copies of several states, a tensor they share copied once: a method's
    hand-off is mostly its shared state again, and a round publishes both. The copies are
    read, never written, so sharing one between the states is safe."""
    copies: dict[tuple, torch.Tensor] = {}

    def copy(tensor: torch.Tensor) -> torch.Tensor:
        key = (tensor.device, tensor.data_ptr(), tensor.dtype, tensor.shape, tensor.stride())
        if key not in copies:
            copies[key] = tensor.detach().to("cpu", copy=True)
        return copies[key]

    return [{name: copy(tensor) for name, tensor in state.items()} for state in states]


def all_finite(tensors: dict[str, torch.Tensor]) -> bool:
    """True when no floating-point value is NaN or infinite."""
    return all(finite(t) for t in tensors.values())


def finite(tensor: torch.Tensor) -> bool:
    """True unless a floating-point value is NaN or infinite: one read of the values and no
    copy of them (``isfinite`` writes a mask as large as the tensor, and is many times
    slower); a NaN or an infinity is the smallest or the largest value."""
    if not tensor.is_floating_point() or tensor.numel() == 0:
        return True
    return bool(torch.isfinite(torch.stack(torch.aminmax(tensor))).all())


# Payloads whose every value was found finite as their bytes were copied in (``wire.py``), so
# that ``validate`` does not read them a second time; with the very tensors found so, and only
# in this process: a tensor put into the payload since is checked again.
_finite_on_arrival: weakref.WeakKeyDictionary[Payload, tuple[weakref.ref, ...]] = (
    weakref.WeakKeyDictionary()
)
_arrival_lock = threading.Lock()


def mark_finite_on_arrival(payload: Payload) -> Payload:
    """Record that every value of ``payload`` was checked finite as it was built."""
    refs = tuple(weakref.ref(t) for t in payload.tensors.values())
    with _arrival_lock:
        _finite_on_arrival[payload] = refs
    return payload


def _checked_on_arrival(payload: Payload) -> bool:
    with _arrival_lock:
        refs = _finite_on_arrival.get(payload)
    tensors = list(payload.tensors.values())
    return (
        refs is not None
        and len(refs) == len(tensors)
        and all(ref() is tensor for ref, tensor in zip(refs, tensors, strict=True))
    )
