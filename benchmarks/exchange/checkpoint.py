"""A client's checkpoint in a steady round: its CPU, its wall time and the bytes it writes.

A client core of each method, checkpointing to a temporary folder, goes through the rounds
as the round loop does (train, publish to peers that acknowledge at once, keep each lap's
total as if its lap had finished, checkpoint, forget what is older than the rounds kept);
only the checkpoint is timed: the round's own wait (the snapshot, handed to the writer), and
the process's CPU and wall time until the writer has it on disk. Bytes are what the process
handed to ``write`` (``wchar``).
"""

from __future__ import annotations

import statistics
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.exchange.lap import QuietControl
from ring_actors.client.core import KEEP_ROUNDS, ClientCore
from ring_actors.client.lap_host import LapResult
from ring_actors.client.method_factory import build_algorithm
from ring_actors.client.resources import ClientData
from ring_actors.config import config_from_dict
from ring_actors.data.images import LabelledImages
from ring_actors.delivery.view import View

SHAPE, CLASSES = (1, 28, 28), 10  # Fashion-MNIST, as the overhead runs


class AckingPeer:
    """A peer that acknowledges every push at once."""

    def receive(self, payload: Any) -> Future:
        done: Future = Future()
        done.set_result(True)
        return done


def written_bytes() -> int:
    """What this process has handed to ``write`` so far."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    raise RuntimeError("no wchar in /proc/self/io")


def checkpoint_row(method: str, rounds: int, folder: Path) -> dict[str, Any]:
    """Median CPU ms, wall ms and MB written per checkpoint, over the rounds after the
    first ``KEEP_ROUNDS + 1`` (all the totals a client keeps are held by then)."""
    config = config_from_dict({"clients": {"count": 3}, "algorithm": {"name": method}})
    x, y = np.zeros((64, *SHAPE), np.uint8), np.arange(64) % CLASSES
    images = LabelledImages.from_arrays(x, y, (0.5,), (0.5,))
    algorithm = build_algorithm(config, 0, CLASSES, SHAPE, torch.device("cpu"))
    core = ClientCore(0, config, algorithm, ClientData(images, images, images), QuietControl(),
                      checkpoint_path=folder / f"{method}.pt")  # fmt: skip
    core.set_view(View(1, (0, 1, 2), (0, 0, 0)), {1: AckingPeer(), 2: AckingPeer()})
    cpu_ms, wall_ms, path_ms, mb = [], [], [], []
    for round_ in range(rounds):
        core.algorithm.train_round(images)
        core.exchange.publish(round_)
        for name in core.algorithm.laps(round_):
            total = {
                k: v.detach().clone() for k, v in core.algorithm.contribute(name, round_).items()
            }
            core.laps.results[(name, round_)] = LapResult(total, (0, 1, 2))
        cpu, wall, wrote = time.process_time(), time.monotonic(), written_bytes()
        core.checkpoint.save(round_)
        handed_over = time.monotonic()
        core.checkpoint.writer.flush()
        if round_ > KEEP_ROUNDS:
            cpu_ms.append((time.process_time() - cpu) * 1000)
            wall_ms.append((time.monotonic() - wall) * 1000)
            path_ms.append((handed_over - wall) * 1000)
            mb.append((written_bytes() - wrote) / 2**20)
        core.laps.forget_before(round_ - KEEP_ROUNDS)
    return {"part": "checkpoint", "method": method, "rounds": len(cpu_ms),
            "cpu_ms": statistics.median(cpu_ms), "wall_ms": statistics.median(wall_ms),
            "on_path_ms": statistics.median(path_ms),
            "mb_written": statistics.median(mb)}  # fmt: skip
