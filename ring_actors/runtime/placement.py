"""Where a client actor landed and what it runs with, as it reports once constructed."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Placement:
    """One client's placement facts: the driver groups clients by node, kills a node's
    clients for a ``kill_node`` fault and prints the launch from them."""

    client: int
    pid: int
    node_id: str
    device: str
    gpu_ids: tuple[str, ...]
    torch_threads: int
    num_train: int
    num_local_test: int
