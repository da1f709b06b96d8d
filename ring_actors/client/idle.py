"""What a client holds while it waits: many clients share a GPU and only the slot holders
compute, so a client that gives its compute slot back also gives back what it does not need
until it next computes.

It moves its optimisers' state (momentum, Adam's moments: one or two copies of the trained
parameters) to host memory, and returns what its allocator cached: torch's CUDA caching
allocator on a GPU, glibc's free pages on the CPU. A GPU then holds about
``slots x working set + clients x (CUDA context + resident state)`` rather than every
client's peak. The state comes back bit for bit when the client takes a slot again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Literal

import torch

from ring_actors.runtime.worker_env import release_freed_memory

if TYPE_CHECKING:
    from ring_actors.client.resources import SlotHolder

HOST = torch.device("cpu")


def optimizers_of(owner: object) -> list[Any]:
    """The optimisers an object keeps in its attributes (directly, or in a dict or list)."""
    found: list[Any] = []
    for value in vars(owner).values():
        items: Iterable[Any] = value
        if isinstance(value, dict):
            items = value.values()
        elif not isinstance(value, (list, tuple)):
            items = (value,)
        found += [v for v in items if _is_optimizer(v) and not any(v is f for f in found)]
    return found


def _is_optimizer(value: object) -> bool:
    return isinstance(getattr(value, "state", None), dict) and hasattr(value, "param_groups")


def move_optimizer_state(optimizers: Iterable[Any], device: torch.device) -> int:
    """Move every state tensor of ``optimizers`` to ``device`` (a copy even on the same
    device, so that a test on the CPU exercises the move); returns the bytes moved."""
    moved = 0
    for optimizer in optimizers:
        for state in optimizer.state.values():
            for key, value in state.items():
                if isinstance(value, torch.Tensor):
                    state[key] = value.to(device, copy=True)
                    moved += value.numel() * value.element_size()
    return moved


def state_devices(optimizers: Iterable[Any]) -> set[str]:
    """The devices the optimisers' state tensors are on."""
    return {
        str(value.device)
        for optimizer in optimizers
        for state in optimizer.state.values()
        for value in state.values()
        if isinstance(value, torch.Tensor)
    }


def idle_facts(owner: object, device: torch.device) -> dict[str, Any]:
    """Where a client's optimiser state is and what its CUDA allocator keeps, for tests."""
    cuda = device.type == "cuda" and torch.cuda.is_initialized()
    return {
        "optimizer_state_devices": sorted(state_devices(optimizers_of(owner))),
        "allocator_reserved_bytes": torch.cuda.memory_reserved(device) if cuda else 0,
    }


def accelerator_memory(device: torch.device) -> dict[str, float]:
    """A GPU client's memory for its round's metrics, in MB: what torch holds now (once the
    slot is given back: the resident state) and the most it allocated and reserved (the
    working set included). Nothing on the CPU."""
    if device.type != "cuda" or not torch.cuda.is_initialized():
        return {}
    return {
        "gpu_allocated_mb": torch.cuda.memory_allocated(device) / 2**20,
        "gpu_peak_allocated_mb": torch.cuda.max_memory_allocated(device) / 2**20,
        "gpu_peak_reserved_mb": torch.cuda.max_memory_reserved(device) / 2**20,
    }


def release_allocator_cache(device: torch.device) -> None:
    """Return what the allocators keep of freed memory: torch's CUDA cache, glibc's pages."""
    if device.type == "cuda" and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
    release_freed_memory()


def offloads(setting: bool | Literal["auto"], device: torch.device) -> bool:
    """``clients.offload_idle``: ``auto`` moves state off a GPU only (on the CPU a move
    would only copy it to where it is)."""
    return device.type != "cpu" if setting == "auto" else setting


class IdleRelease:
    """A client's slots, wrapped: on taking one, its optimiser state comes back to its
    device; on giving one back, the state goes to host memory and the allocator's cache is
    returned before the next client is let in."""

    def __init__(
        self,
        slots: SlotHolder,
        owner: Callable[[], object],
        device: torch.device,
        offload: bool,
    ) -> None:
        self.slots = slots
        self.owner = owner  # the method now (a restored checkpoint replaces it)
        self.device = device
        self.offload = offload
        self.offloaded = False

    @property
    def waited_s(self) -> float:
        return self.slots.waited_s

    @contextmanager
    def hold(self, round_: int) -> Iterator[None]:
        with self.slots.hold(round_):
            if self.offloaded:
                move_optimizer_state(optimizers_of(self.owner()), self.device)
                self.offloaded = False
            try:
                yield
            finally:
                self.release()

    def release(self) -> None:
        """What a client does as it gives its slot back (and once it is built)."""
        if self.offload:
            move_optimizer_state(optimizers_of(self.owner()), HOST)
            self.offloaded = True
        release_allocator_cache(self.device)
