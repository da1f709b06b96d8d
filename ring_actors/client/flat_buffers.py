"""The buffers a member's engine laps are summed in, reused once nothing shares them.

A total goes out as views of the buffer it was summed in (no copy) and is kept for peers a
round behind, checkpointed and sent, so a buffer is free again only when no tensor shares its
memory. A fresh buffer costs more than the copy into it when the state is large: blocks over
glibc's mmap threshold (32 MiB) come from the kernel page by page, zeroed, at every lap
(ResNet-18's 42.7 MiB flattened in 27-36 ms into a fresh buffer, 8-9 ms into one reused, one
torch thread here), and every member of a lap pays it on the same cores.
"""

from __future__ import annotations

import torch

from ring_actors.client.chunk_layout import Layout, flatten

Tensors = dict[str, torch.Tensor]
BufferKey = tuple[tuple[str, torch.dtype, int, torch.device], ...]


def shared(tensor: torch.Tensor) -> bool:
    """Whether a tensor other than ``tensor`` holds its memory: a view, or one built on its
    storage (a pending collective's, a checkpoint's)."""
    storage = tensor.untyped_storage()  # the call's own reference counts too
    return torch._C._storage_Use_Count(storage._cdata) > 2


class FlatBuffers:
    """One lap's buffers by layout: those whose totals are still held, and at most
    ``spare`` free ones (a buffer each, beyond those, for the rounds whose totals are kept)."""

    def __init__(self, spare: int = 1) -> None:
        self.spare = spare
        self.held: dict[str, tuple[BufferKey, list[Tensors]]] = {}

    def flatten(self, lap: str, contribution: Tensors, layout: Layout) -> Tensors:
        """``contribution`` copied into one 1-D buffer per segment (``chunk_layout.flatten``'s
        layout, on each segment's first tensor's device), in buffers nothing else holds."""
        devices = {
            name: contribution[s.entries[0][0]].device for name, s in layout.segments.items()
        }
        key = tuple((n, s.dtype, s.numel, devices[n]) for n, s in layout.segments.items())
        known, buffers = self.held.get(lap, (key, []))
        if known != key:  # another layout: the old buffers go with their last totals
            buffers = []
        free = [b for b in buffers if not any(shared(t) for t in b.values())]
        if free:
            flat = free.pop()
        else:
            flat = {
                n: torch.empty(s.numel, dtype=s.dtype, device=devices[n])
                for n, s in layout.segments.items()
            }
            buffers.append(flat)
        dropped = {id(extra) for extra in free[self.spare :]}
        buffers = [b for b in buffers if id(b) not in dropped]
        self.held[lap] = (key, buffers)
        return flatten(contribution, layout, into=flat)
