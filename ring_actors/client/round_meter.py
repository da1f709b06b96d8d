"""What a client measures of each round for its report: time, CPU, bytes and hops sent, the
wait for a slot and for the in-neighbours, and memory. The process's CPU counts everything the
framework does beside training, so a run's cost per client-round beyond training is read from
its reports."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol

import torch

from ring_actors.client.resources import SlotHolder
from ring_actors.client.slot_release import accelerator_memory
from ring_actors.client.training import Trained, peak_rss_mb
from ring_actors.delivery.outbox import Outbox

Mark = tuple[float, int, int, float]  # the time, bytes and hops sent, slot wait so far


class Gathering(Protocol):
    gather_wait_s: float  # the last gather's wait for the in-neighbours


@dataclass(eq=False)
class RoundMeter:
    outbox: Outbox
    slots: SlotHolder
    exchange: Gathering
    samples: int
    device: torch.device
    cpu_mark: float = field(default_factory=time.process_time)  # the next round counts from

    def start(self) -> Mark:
        """What a round's measures count from."""
        outbox = self.outbox
        return time.monotonic(), outbox.bytes_dispatched, outbox.hops, self.slots.waited_s

    def measured(
        self, before: Mark, merged: int, trained: Trained, delay: float
    ) -> dict[str, float]:
        """The round's measures since ``before``."""
        started, bytes_before, hops_before, slot_wait_before = before
        measured = dict(
            merged=float(merged),
            train_s=trained.train_s,
            train_cpu_s=trained.train_cpu_s,
            merge_cpu_s=trained.merge_cpu_s,
            process_cpu_s=self._process_cpu_s(),
            slot_wait_s=self.slots.waited_s - slot_wait_before,
            round_s=time.monotonic() - started,
            compute_delay_s=trained.slowed_s,
            gather_wait_s=self.exchange.gather_wait_s,
            samples=float(self.samples),
            bytes_sent=float(self.outbox.bytes_dispatched - bytes_before),
            hops=float(self.outbox.hops - hops_before),  # with bytes_sent, outlives a crash
            peak_rss_mb=peak_rss_mb(),
            **accelerator_memory(self.device),
        )
        if delay:
            measured["slow_delay_s"] = delay
        return measured

    def _process_cpu_s(self) -> float:
        """The CPU every thread of this process used since the previous round's measures:
        training, and all the framework does beside it (answering peers, the checkpoint
        after the last report, Ray's own loop). Clients that share a process (the
        in-process ring) each report the process's whole."""
        now = time.process_time()
        used, self.cpu_mark = now - self.cpu_mark, now
        return used
