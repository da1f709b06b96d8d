"""The heterogeneity a run applies: speed factors, link times and offline spans, seeded alike
on every client, so every process computes the same facts without asking anyone."""

from __future__ import annotations

import itertools
import math
import random
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from ring_actors.delivery.transport import ClientHandle
from ring_actors.heterogeneity.links import LinkedHandle
from ring_actors.heterogeneity.section import HeterogeneitySection
from ring_actors.heterogeneity.trace_file import MAX_COMPUTE_FACTOR, MAX_LINK_DELAY_S, Trace

if TYPE_CHECKING:  # the coordinator reads this module without torch
    from ring_actors.delivery.payloads import Payload


class DrawnPeriods(Sequence[tuple[float, float]]):
    """Off periods without end: online ~Exp(mean_online_s), then offline ~Exp(mean_offline_s),
    again and again. Each is drawn when it is first read, so a run holds only the periods it
    has reached, and one seed gives one sequence however far it is read."""

    def __init__(self, rng: random.Random, mean_online_s: float, mean_offline_s: float) -> None:
        self.rng = rng
        self.rates = (1 / mean_online_s, 1 / mean_offline_s)
        self.drawn: list[tuple[float, float]] = []
        self.end_s = 0.0  # where the last drawn period ends

    def __getitem__(self, index: int) -> tuple[float, float]:
        if not isinstance(index, int) or index < 0:
            raise TypeError("drawn periods have no end: read them by index from 0 or in order")
        while len(self.drawn) <= index:
            start = self.end_s + self.rng.expovariate(self.rates[0])
            self.end_s = start + self.rng.expovariate(self.rates[1])
            self.drawn.append((start, self.end_s))
        return self.drawn[index]

    def __len__(self) -> int:
        return sys.maxsize  # no end: every index a reader reaches holds a period

    def __iter__(self) -> Iterator[tuple[float, float]]:
        return (self[i] for i in itertools.count())


class Heterogeneity:
    """The section's facts for one run: the same on every client, computed on demand."""

    def __init__(self, section: HeterogeneitySection, seed: int, total_clients: int) -> None:
        self.section = section
        self.seed = seed
        self.trace = section.read_trace() if section.trace else Trace({}, {}, {})
        self.factors = self._draw_factors(total_clients)
        self.offline_cache: dict[int, Sequence[tuple[float, float]]] = {}

    @property
    def links_apply(self) -> bool:
        links = self.section.links
        return links.latency_s > 0 or links.bandwidth_bytes_s is not None or bool(self.trace.links)

    def _draw_factors(self, total: int) -> list[float]:
        compute = self.section.compute
        factors = [1.0] * total
        if compute.distribution == "lognormal":
            rng = random.Random(f"{self.seed}:compute")
            factors = [math.exp(compute.spread * abs(rng.gauss(0, 1))) for _ in range(total)]
            fastest = min(factors, default=1.0)
            factors = [min(MAX_COMPUTE_FACTOR, f / fastest) for f in factors]
        for client, factor in enumerate(compute.factors[:total]):
            factors[client] = factor
        for client, factor in self.trace.compute.items():
            if client < total:
                factors[client] = factor
        return factors

    def speed_factor(self, client: int) -> float:
        return self.factors[client] if client < len(self.factors) else 1.0

    def compute_delay(self, client: int, compute_s: float) -> float:
        """Extra seconds a client of this speed would have needed for ``compute_s``."""
        return (self.speed_factor(client) - 1.0) * max(0.0, compute_s)

    def link(self, sender: int, receiver: int) -> tuple[float, float | None]:
        """(latency in s, bandwidth in bytes/s or None) of the directed link; a drawn latency
        at most MAX_LINK_DELAY_S."""
        links = self.section.links
        latency, bandwidth = links.latency_s, links.bandwidth_bytes_s
        if links.distribution == "lognormal":
            rng = random.Random(f"{self.seed}:link:{sender}:{receiver}")
            latency *= math.exp(links.spread * rng.gauss(0, 1))
            if bandwidth is not None:
                bandwidth *= math.exp(links.spread * rng.gauss(0, 1))
        lat, bw = self.trace.links.get((sender, receiver), (None, None))
        latency = min(MAX_LINK_DELAY_S, latency if lat is None else lat)
        return (latency, bandwidth if bw is None else bw)

    def hop(self, sender: int, receiver: int, nbytes: int) -> tuple[float, float]:
        """(latency, ``B / bandwidth``) of a hop of ``nbytes`` on that link, each at most
        MAX_LINK_DELAY_S: a drawn tail or a huge payload holds a hop a day, not for good."""
        latency, bandwidth = self.link(sender, receiver)
        transfer_s = nbytes / bandwidth if bandwidth else 0.0
        return latency, min(MAX_LINK_DELAY_S, transfer_s)

    def hop_s(self, sender: int, receiver: int, nbytes: int) -> float:
        """``latency + B / bandwidth`` on that link, queueing aside; at most MAX_LINK_DELAY_S."""
        return min(MAX_LINK_DELAY_S, sum(self.hop(sender, receiver, nbytes)))

    def offline_periods(self, client: int) -> Sequence[tuple[float, float]]:
        """The client's offline spans [from_s, to_s) in order, in seconds of the run: the
        trace's, or drawn ones without end, drawn as far as they are read."""
        if client in self.offline_cache:
            return self.offline_cache[client]
        periods: Sequence[tuple[float, float]] = self.trace.offline.get(client, [])
        avail = self.section.availability
        drawn = avail.mean_online_s is not None and (not avail.clients or client in avail.clients)
        if drawn and client not in self.trace.offline:
            assert avail.mean_online_s is not None
            rng = random.Random(f"{self.seed}:availability:{client}")
            periods = DrawnPeriods(rng, avail.mean_online_s, avail.mean_offline_s)
        self.offline_cache[client] = periods
        return periods

    def offline_until(self, client: int, at_s: float) -> float | None:
        """When the client comes back, if it is offline at ``at_s``; else None."""
        for start, end in self.offline_periods(client):
            if start <= at_s < end:
                return end
            if start > at_s:
                return None
        return None

    def wrap(
        self,
        sender: int,
        handles: Mapping[int, ClientHandle],
        report: Callable[[Payload, int, float], None],
    ) -> dict[int, ClientHandle]:
        """Handles whose deliveries cross this sender's links; unchanged without links."""
        if not self.links_apply:
            return dict(handles)
        return {c: LinkedHandle(h, self, sender, c, report) for c, h in handles.items()}
