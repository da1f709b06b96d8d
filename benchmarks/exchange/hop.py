"""One hop by phase: a payload from this process to a receiver actor that takes it as a client
does, each step stamped on the node's monotonic clock, beside a bare actor call carrying the
same bytes and a copy of them in memory."""

from __future__ import annotations

import statistics
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import ray
import torch

from benchmarks.exchange.lap import MIB, timed_ms
from ring_actors.delivery.inbox import Inbox
from ring_actors.delivery.payload_checks import HEADROOM_BYTES, Bounds, check_tensors, specs
from ring_actors.delivery.payloads import Channel, Payload
from ring_actors.delivery.spool import Spool
from ring_actors.delivery.wire import WirePayload, from_wire, to_wire

PHASES = ("encode", "transfer", "rebuild", "finiteness", "validation", "spool", "queue", "ack")


def payload_of(mb: float, seq: int = 0) -> Payload:
    """``mb`` MiB of float32 in tensors of 4 MiB at most, like a model's largest layers."""
    tensors, left = {}, int(mb * MIB) // 4
    while left > 0:
        tensors[f"t{len(tensors)}"] = torch.randn(min(left, MIB))
        left -= MIB
    return Payload(0, 0, 0, seq, tensors, num_samples=1)


@ray.remote(num_cpus=0)
class HopReceiver:
    """Takes a payload as a client does, stamping each step on the node's monotonic clock."""

    def __init__(self, spool_dir: str) -> None:
        torch.set_num_threads(1)
        self.spool, self.inbox = Spool(Path(spool_dir)), Inbox()
        self.bounds = Bounds(rounds=1, epoch_lead=0)
        self.expected: dict = {}
        self.limit = 0
        self.last: WirePayload | None = None

    def expect(self, expected: dict, limit: int) -> None:
        self.expected, self.limit = expected, limit

    def bare(self, data: np.ndarray) -> int:
        return int(data.size)

    def receive(self, wire: WirePayload) -> dict[str, float]:
        stamps = {"arrived": time.monotonic()}
        payload = from_wire(wire, self.limit)
        stamps["rebuilt"] = time.monotonic()
        payload.validate(None, self.limit)
        self.bounds.check(payload, 0)
        check_tensors(payload, self.expected)
        stamps["validated"] = time.monotonic()
        self.spool.keep(payload)
        stamps["spooled"] = time.monotonic()
        self.inbox.put(payload)
        stamps["queued"] = time.monotonic()
        self.last = wire
        return stamps

    def copy_ms(self) -> float:
        """A plain copy of the last payload's bytes into new tensors: the rebuild alone."""
        assert self.last is not None
        started = time.monotonic()
        for wired in self.last.tensors.values():
            tensor = torch.empty(wired.shape, dtype=getattr(torch, wired.dtype))
            np.copyto(tensor.view(-1).view(torch.uint8).numpy(), wired.data)
        return (time.monotonic() - started) * 1000

    def reset(self) -> None:
        self.inbox.take(Channel.SHARE)
        self.spool.discard(self.spool.names())
        self.last = None


def hop_row(receiver: Any, mb: float, repeats: int) -> dict[str, Any]:
    payload = payload_of(mb)
    ray.get(receiver.expect.remote(specs(payload.tensors), payload.nbytes + HEADROOM_BYTES))
    runs: list[dict[str, float]] = []
    for rep in range(repeats + 1):  # the first one warms up
        sent_payload = replace(payload, seq=rep)
        started = time.monotonic()
        wire = to_wire(sent_payload)
        sent = time.monotonic()
        stamps = ray.get(receiver.receive.remote(wire))
        acked = time.monotonic()
        copy_ms = ray.get(receiver.copy_ms.remote())
        ray.get(receiver.reset.remote())
        from_wire_ms = (stamps["rebuilt"] - stamps["arrived"]) * 1000
        rebuild_ms = min(copy_ms, from_wire_ms)
        ms = {
            "encode": sent - started,
            "transfer": stamps["arrived"] - sent,
            "validation": stamps["validated"] - stamps["rebuilt"],
            "spool": stamps["spooled"] - stamps["validated"],
            "queue": stamps["queued"] - stamps["spooled"],
            "ack": acked - stamps["queued"],
            "whole": acked - started,
        }
        ms = {k: v * 1000 for k, v in ms.items()}
        ms.update(rebuild=rebuild_ms, finiteness=from_wire_ms - rebuild_ms)
        if rep:
            runs.append(ms)
    data = np.zeros(payload.nbytes, np.uint8)
    bare, copies = [], []
    for _ in range(repeats):
        bare.append(timed_ms(lambda: ray.get(receiver.bare.remote(data))))
        flat = torch.empty(payload.nbytes, dtype=torch.uint8)
        copies.append(timed_ms(lambda flat=flat: torch.empty_like(flat).copy_(flat)))
    return {
        "part": "hop",
        "mb": mb,
        "repeats": repeats,
        "whole_ms": statistics.fmean(r["whole"] for r in runs),
        "whole_median_ms": statistics.median(r["whole"] for r in runs),
        "phases_ms": {p: statistics.fmean(r[p] for r in runs) for p in PHASES},
        "bare_ray_ms": statistics.median(bare),
        "memcpy_ms": statistics.median(copies),
    }
