"""``DFedAvg.merge`` of k received states into the client's own, on one torch thread, beside
one memcpy of the state per state merged."""

from __future__ import annotations

import statistics
from typing import Any

import torch

from benchmarks.exchange.lap import CLASSES, MIB, SHAPE, state_of, timed_ms
from ring_actors.algorithms.base import TaskSpec
from ring_actors.algorithms.dfedavg import DFedAvg, DFedAvgOptions
from ring_actors.delivery.payloads import Payload


def merge_row(backbone: str, received: int, repeats: int) -> dict[str, Any]:
    """``DFedAvg.merge`` of ``received`` states into its own, against a memcpy of each."""
    state = state_of(backbone)
    options = DFedAvgOptions(backbone=backbone)
    task = TaskSpec(CLASSES, SHAPE, 1, 32, torch.device("cpu"), seed=0, shared_seed=0)
    method = DFedAvg(options, task)
    payloads = [Payload(1 + k, 0, 0, 0, state, num_samples=1) for k in range(received)]
    own = method.model.state_dict()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        merge_ms = [timed_ms(lambda: method.merge(payloads)) for _ in range(repeats)]

        def copies() -> None:
            for _ in range(received):
                for name, value in own.items():
                    value.copy_(state[name])

        memcpy_ms = [timed_ms(copies) for _ in range(repeats)]
    finally:
        torch.set_num_threads(threads)
    mb = sum(t.numel() * t.element_size() for t in state.values()) / MIB
    return {"part": "merge", "backbone": backbone, "received": received, "mb": round(mb, 1),
            "merge_ms": statistics.median(merge_ms),
            "memcpy_ms": statistics.median(memcpy_ms)}  # fmt: skip
