"""What a client holds while it waits: many clients share a GPU and only the slot holders
compute, so a client that gives its compute slot back also gives back what it does not need
until it next computes.

It moves its optimisers' state (momentum, Adam's moments: one or two copies of the trained
parameters) to host memory, and returns what its allocator cached: torch's CUDA caching
allocator on a GPU, glibc's free pages on the CPU. A GPU then holds about
``slots x working set + clients x (CUDA context + resident state)`` rather than every
client's peak. The state comes back bit for bit when the client takes a slot again.

A large model's parameters can wait on the host too (``clients.offload_parameters_mb``): they
come back for every call into the method, a slot's compute and the few calls between slots
(a pull's decision, a lap's contribution and total, publishing), and leave again after it.
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


def _attributes(owner: object, wanted: Callable[[object], bool]) -> list[Any]:
    """What an object keeps in its attributes (directly, or in a dict or list) that is
    ``wanted``, each once."""
    found: list[Any] = []
    for value in vars(owner).values():
        items: Iterable[Any] = value
        if isinstance(value, dict):
            items = value.values()
        elif not isinstance(value, (list, tuple)):
            items = (value,)
        found += [v for v in items if wanted(v) and not any(v is f for f in found)]
    return found


def optimizers_of(owner: object) -> list[Any]:
    """The optimisers an object keeps in its attributes (directly, or in a dict or list)."""
    return _attributes(owner, _is_optimizer)


def modules_of(owner: object) -> list[torch.nn.Module]:
    """The networks an object keeps in its attributes (directly, or in a dict or list)."""
    return _attributes(owner, lambda value: isinstance(value, torch.nn.Module))


def parameter_bytes(modules: Iterable[torch.nn.Module]) -> int:
    """The bytes of the modules' parameters and buffers, each tensor counted once."""
    seen: dict[int, int] = {}
    for module in modules:
        for tensor in [*module.parameters(), *module.buffers()]:
            seen[id(tensor)] = tensor.numel() * tensor.element_size()
    return sum(seen.values())


def move_modules(modules: Iterable[torch.nn.Module], device: torch.device) -> None:
    """Move the modules' parameters, gradients and buffers to ``device`` in place (a copy
    even on the same device, as for the optimiser state): each parameter stays the same
    object, so the optimisers that hold it need nothing."""
    for module in modules:
        module._apply(lambda tensor: tensor.to(device, copy=True))


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
    """Return what the allocators keep of freed memory: cuBLAS's workspaces (tens of MB a
    process on Hopper, allocated through torch and kept across calls), torch's CUDA cache,
    glibc's pages. The workspaces come back on the next matrix product."""
    if device.type == "cuda" and torch.cuda.is_initialized():
        clear_workspaces = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
        if clear_workspaces is not None:
            torch.cuda.synchronize(device)
            clear_workspaces()
        torch.cuda.empty_cache()
    release_freed_memory()


def offloads(setting: bool | Literal["auto"], device: torch.device) -> bool:
    """``clients.offload_idle``: ``auto`` moves state off a GPU only (on the CPU a move
    would only copy it to where it is)."""
    return device.type != "cpu" if setting == "auto" else setting


def offloads_parameters(offload: bool, threshold_mb: float | None, owner: object) -> bool:
    """``clients.offload_parameters_mb``: parameters wait on the host too when the state
    moves at all and the method's networks hold at least that many MB."""
    if not offload or threshold_mb is None:
        return False
    return parameter_bytes(modules_of(owner)) >= threshold_mb * 2**20


class IdleRelease:
    """A client's slots, wrapped: on taking one, its optimiser state (and offloaded
    parameters) come back to its device; on giving one back, they go to host memory and the
    allocator's cache is returned before the next client is let in."""

    def __init__(
        self,
        slots: SlotHolder,
        owner: Callable[[], object],
        device: torch.device,
        offload: bool,
        offload_parameters: bool = False,
    ) -> None:
        self.slots = slots
        self.owner = owner  # the method now (a restored checkpoint replaces it)
        self.device = device
        self.offload = offload
        self.offload_parameters = offload_parameters
        self.offloaded = False
        self.parameters_away = False

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
                with self.resident():
                    yield
            finally:
                self.release()

    @contextmanager
    def resident(self) -> Iterator[None]:
        """The parameters on the device for a call into the method, and back on the host
        after it if they were there before."""
        away = self.parameters_away
        if away:
            move_modules(modules_of(self.owner()), self.device)
            self.parameters_away = False
        try:
            yield
        finally:
            if away:
                self._park_parameters()
                # Freed blocks stay reserved by this process until the cache is returned.
                release_allocator_cache(self.device)

    def release(self) -> None:
        """What a client does as it gives its slot back (and once it is built)."""
        if self.offload:
            move_optimizer_state(optimizers_of(self.owner()), HOST)
            self.offloaded = True
        self._park_parameters()
        release_allocator_cache(self.device)

    def _park_parameters(self) -> None:
        if self.offload_parameters and not self.parameters_away:
            move_modules(modules_of(self.owner()), HOST)
            self.parameters_away = True
