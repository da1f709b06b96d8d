"""How many clients of a node compute at once, and with how many threads: pure arithmetic,
shared by the Ray actors and by the plan a dry run prints."""

from __future__ import annotations

from collections.abc import Mapping


def slot_limit(concurrency: int | str, slots_per_gpu: int, num_gpus: float, node: Mapping) -> int:
    """Clients of one node allowed to compute at once.

    ``auto``: the node's cores, or, for clients on GPUs, its GPUs times ``slots_per_gpu``.
    """
    if concurrency != "auto":
        return int(concurrency)
    if num_gpus > 0 and node.get("GPU", 0) >= 1:
        return max(1, int(node["GPU"]) * slots_per_gpu)
    return max(1, int(node.get("CPU", 1)))


def threads_per_slot(limit: int, node: Mapping) -> int:
    """Torch threads of one computing client: the node's cores shared by its slots."""
    return max(1, int(node.get("CPU", 1)) // limit)
