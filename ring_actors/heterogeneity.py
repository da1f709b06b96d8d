"""Heterogeneous clients, links and availability, for any method and topology.

Real federations mix devices an order of magnitude apart in speed, links from a LAN to a
slow home uplink, and clients that come and go. This module turns the config's
``heterogeneity`` section (or a trace file) into three deterministic, seeded facts every
client computes alike:

- **compute**: a speed factor per client (1 = as fast as the host; 4 = four times slower).
  A round's measured training time ``t`` is followed by ``(factor - 1) * t`` of sleep,
  outside any compute slot, so the wait costs no core;
- **links**: a latency and a bandwidth per directed link, so a hop of ``B`` bytes reaches
  its receiver ``latency + B / bandwidth`` seconds after it is sent (after the hops queued
  before it on that link), inside the hop timeout that the send is acknowledged within;
- **availability**: periods a client is offline, measured from the start of its round
  loop. An offline client leaves the ring (it is bypassed), keeps everything it holds,
  and is spliced in again when it comes back.

Trace file (JSON), every part optional; client ids are the run's::

    {
      "compute": {"0": 1.0, "5": 8.0},                      # speed factor per client
      "links": [{"from": 0, "to": 1, "latency_s": 0.05,      # per directed link; or
                 "bandwidth_bytes_s": 1.25e6}],
      "latency_s": [[0, 0.02], [0.02, 0]],                   # matrices, row = sender
      "bandwidth_bytes_s": [[0, 1e7], [1e7, 0]],
      "availability": {"3": [[10.0, 25.0], [60.0, 70.0]]}    # offline [from_s, to_s)
    }

A trace's entries replace the drawn ones for the clients and links it names. FedScale's
published device traces convert to this format (``ring_actors/fedscale_trace.py``).
"""

from __future__ import annotations

import heapq
import itertools
import json
import math
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ring_actors.delivery.transport import ClientHandle, Pending

if TYPE_CHECKING:  # the coordinator reads this module's config section without torch
    from ring_actors.delivery.payloads import Payload

DISTRIBUTIONS = ("none", "lognormal")
OFFLINE_HORIZON_S = 7 * 24 * 3600.0  # drawn availability is generated up to this far


def _must(ok: bool, key: str, allowed: str, value: Any = ...) -> None:
    """A ValueError naming the key; the config loader adds the section's prefix."""
    if not ok:
        got = "" if value is ... else f", got {value!r}"
        raise ValueError(f"{key}: must be {allowed}{got}")


@dataclass(frozen=True)
class ComputeSection:
    """Speed factors: a fixed list by client id (clients past its end: 1), or drawn."""

    factors: tuple[float, ...] = ()
    # lognormal: factor = exp(spread * |z|), z standard normal, seeded by experiment.seed;
    # the fastest client is 1. spread 1.4 puts about 10x between the fastest and slowest tenth.
    distribution: Literal["none", "lognormal"] = "none"
    spread: float = 1.0

    def __post_init__(self) -> None:
        bad = [f for f in self.factors if not f >= 1]
        _must(not bad, "factors", "a list of numbers >= 1 (1 = full speed)", bad)
        _must(self.spread > 0, "spread", "a number > 0", self.spread)
        _must(self.distribution in DISTRIBUTIONS, "distribution", "none or lognormal")


@dataclass(frozen=True)
class LinksSection:
    """Every directed link's latency and bandwidth; drawn links vary around these."""

    latency_s: float = 0.0
    bandwidth_bytes_s: float | None = None  # null: no transfer time
    # lognormal: each link's latency and bandwidth times exp(spread * z), seeded per link.
    distribution: Literal["none", "lognormal"] = "none"
    spread: float = 1.0

    def __post_init__(self) -> None:
        _must(self.latency_s >= 0, "latency_s", "a number >= 0", self.latency_s)
        bw = self.bandwidth_bytes_s
        _must(bw is None or bw > 0, "bandwidth_bytes_s", "null or a number > 0", bw)
        _must(self.spread > 0, "spread", "a number > 0", self.spread)
        _must(self.distribution in DISTRIBUTIONS, "distribution", "none or lognormal")


@dataclass(frozen=True)
class AvailabilitySection:
    """Drawn on/off periods: online for ~Exp(mean_online_s), then offline ~Exp(mean_offline_s).

    The long-run share of time offline is ``mean_offline_s / (mean_online_s + mean_offline_s)``.
    """

    mean_online_s: float | None = None  # null: always online (unless a trace says otherwise)
    mean_offline_s: float = 0.0
    clients: tuple[int, ...] = ()  # who may go offline; empty: every client

    def __post_init__(self) -> None:
        on, off = self.mean_online_s, self.mean_offline_s
        _must(on is None or on > 0, "mean_online_s", "null or a number > 0", on)
        _must(off >= 0, "mean_offline_s", "a number >= 0", off)
        if on is not None:
            _must(off > 0, "mean_offline_s", "a number > 0 with mean_online_s", off)


@dataclass(frozen=True)
class HeterogeneitySection:
    compute: ComputeSection = field(default_factory=ComputeSection)
    links: LinksSection = field(default_factory=LinksSection)
    availability: AvailabilitySection = field(default_factory=AvailabilitySection)
    trace: str | None = None  # a JSON trace file (format in ring_actors/heterogeneity.py)

    def __post_init__(self) -> None:
        if self.trace is not None:
            try:  # read here, so a missing or malformed file stops the run before it starts
                read_trace(self.trace)
            except (OSError, ValueError) as err:
                raise ValueError(f"trace: {err}") from err

    def check_clients(self, total: int) -> None:
        """Every client id named anywhere must be one of the run's ``total`` clients."""
        named = {"heterogeneity.availability.clients": list(self.availability.clients)}
        if self.trace is not None:
            trace = read_trace(self.trace)
            named["heterogeneity.trace"] = [
                *trace.compute,
                *trace.offline,
                *(c for link in trace.links for c in link),
            ]
        for key, ids in named.items():
            bad = sorted({c for c in ids if not 0 <= c < total})
            _must(not bad, key, f"client ids in [0, {total})", bad)


@dataclass(frozen=True)
class Trace:
    compute: dict[int, float]
    links: dict[tuple[int, int], tuple[float | None, float | None]]  # latency, bandwidth
    offline: dict[int, list[tuple[float, float]]]


def read_trace(path: str | Path) -> Trace:
    """Parse and check a trace file; ValueError names the entry that is wrong."""
    data = json.loads(Path(path).read_text())
    _must(isinstance(data, dict), "trace", "a JSON object", type(data).__name__)
    unknown = set(data) - {"compute", "links", "latency_s", "bandwidth_bytes_s", "availability"}
    _must(not unknown, "trace", "keys among compute, links, latency_s, bandwidth_bytes_s, "
          "availability", sorted(unknown))  # fmt: skip
    compute = {int(c): float(f) for c, f in (data.get("compute") or {}).items()}
    bad = {c: f for c, f in compute.items() if not f >= 1}
    _must(not bad, "trace.compute", "speed factors >= 1", bad)
    links: dict[tuple[int, int], tuple[float | None, float | None]] = {}
    for name in ("latency_s", "bandwidth_bytes_s"):
        matrix = data.get(name)
        if matrix is None:
            continue
        _must(isinstance(matrix, list), f"trace.{name}", "a matrix (list of rows)")
        for a, row in enumerate(matrix):
            for b, value in enumerate(row):
                if a != b:
                    lat, bw = links.get((a, b), (None, None))
                    links[(a, b)] = (float(value), bw) if name == "latency_s" else (lat, value)
    for entry in data.get("links") or []:
        _must({"from", "to"} <= set(entry), "trace.links[]", "entries with from and to", entry)
        key = (int(entry["from"]), int(entry["to"]))
        lat, bw = links.get(key, (None, None))
        links[key] = (entry.get("latency_s", lat), entry.get("bandwidth_bytes_s", bw))
    for key, (lat, bw) in links.items():
        _must(lat is None or lat >= 0, f"trace link {key}", "a latency_s >= 0", lat)
        _must(bw is None or bw > 0, f"trace link {key}", "a bandwidth_bytes_s > 0", bw)
    offline: dict[int, list[tuple[float, float]]] = {}
    for client, periods in (data.get("availability") or {}).items():
        spans = sorted((float(a), float(b)) for a, b in periods)
        bad_spans = [s for s in spans if not 0 <= s[0] < s[1]]
        _must(not bad_spans, f"trace.availability.{client}", "[from_s, to_s] with from < to")
        offline[int(client)] = spans
    return Trace(compute, links, offline)


class Heterogeneity:
    """The section's facts for one run: the same on every client, computed on demand."""

    def __init__(self, section: HeterogeneitySection, seed: int, total_clients: int) -> None:
        self.section = section
        self.seed = seed
        self.trace = read_trace(section.trace) if section.trace else Trace({}, {}, {})
        self.factors = self._draw_factors(total_clients)
        self.offline_cache: dict[int, list[tuple[float, float]]] = {}

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
            factors = [f / fastest for f in factors]
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
        """(latency in s, bandwidth in bytes/s or None) of the directed link."""
        links = self.section.links
        latency, bandwidth = links.latency_s, links.bandwidth_bytes_s
        if links.distribution == "lognormal":
            rng = random.Random(f"{self.seed}:link:{sender}:{receiver}")
            latency *= math.exp(links.spread * rng.gauss(0, 1))
            if bandwidth is not None:
                bandwidth *= math.exp(links.spread * rng.gauss(0, 1))
        lat, bw = self.trace.links.get((sender, receiver), (None, None))
        return (latency if lat is None else lat, bandwidth if bw is None else bw)

    def hop_s(self, sender: int, receiver: int, nbytes: int) -> float:
        """``latency + B / bandwidth`` on that link, queueing aside."""
        latency, bandwidth = self.link(sender, receiver)
        return latency + (nbytes / bandwidth if bandwidth else 0.0)

    def offline_periods(self, client: int) -> list[tuple[float, float]]:
        """The client's offline spans [from_s, to_s), seconds from the start of its rounds."""
        if client in self.offline_cache:
            return self.offline_cache[client]
        periods = list(self.trace.offline.get(client, []))
        avail = self.section.availability
        drawn = avail.mean_online_s is not None and (not avail.clients or client in avail.clients)
        if drawn and client not in self.trace.offline:
            assert avail.mean_online_s is not None
            rng = random.Random(f"{self.seed}:availability:{client}")
            t = 0.0
            while t < OFFLINE_HORIZON_S:
                t += rng.expovariate(1 / avail.mean_online_s)
                off = rng.expovariate(1 / avail.mean_offline_s)
                periods.append((t, t + off))
                t += off
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


class _Deferred:
    """A call made when its link delivers it: until then, not done."""

    def __init__(self, call: Callable[[], Pending[Any]]) -> None:
        self.call = call
        self.inner: Pending[Any] | None = None
        self.fired = threading.Event()

    def fire(self) -> None:
        self.inner = self.call()
        self.fired.set()

    def done(self) -> bool:
        return self.fired.is_set() and self.inner is not None and self.inner.done()

    def result(self, timeout: float | None = None) -> Any:
        started = time.monotonic()
        if not self.fired.wait(timeout):
            raise TimeoutError("still on the link")
        assert self.inner is not None
        left = None if timeout is None else max(0.0, timeout - (time.monotonic() - started))
        return self.inner.result(left)


class LinkScheduler:
    """One thread per process that makes deferred calls when they fall due."""

    _instance: LinkScheduler | None = None
    _lock = threading.Lock()

    def __init__(self) -> None:
        self.heap: list[tuple[float, int, _Deferred]] = []
        self.count = itertools.count()
        self.cond = threading.Condition()
        threading.Thread(target=self._run, name="link-scheduler", daemon=True).start()

    @classmethod
    def shared(cls) -> LinkScheduler:
        with cls._lock:
            if cls._instance is None:
                cls._instance = LinkScheduler()
            return cls._instance

    def at(self, due: float, deferred: _Deferred) -> None:
        with self.cond:
            heapq.heappush(self.heap, (due, next(self.count), deferred))
            self.cond.notify()

    def _run(self) -> None:
        while True:
            with self.cond:
                while not self.heap or self.heap[0][0] > time.monotonic():
                    wait = self.heap[0][0] - time.monotonic() if self.heap else None
                    self.cond.wait(wait)
                _, _, deferred = heapq.heappop(self.heap)
            try:
                deferred.fire()
            except Exception:  # noqa: BLE001 - a failing call is the caller's to see
                deferred.inner = _Raised(RuntimeError("the link could not deliver"))
                deferred.fired.set()


class _Raised:
    def __init__(self, error: BaseException) -> None:
        self.error = error

    def done(self) -> bool:
        return True

    def result(self, timeout: float | None = None) -> Any:
        raise self.error


class LinkedHandle:
    """A peer's handle behind a slow link: pushes and pull answers take the link's time.

    Hops on one link queue behind each other (the link carries one at a time), so a
    burst of pushes takes the sum of their transfer times, as on a real uplink.
    """

    def __init__(
        self,
        inner: ClientHandle,
        model: Heterogeneity,
        sender: int,
        receiver: int,
        report: Callable[[Payload, int, float], None],
    ) -> None:
        self.inner = inner
        self.model = model
        self.sender, self.receiver = sender, receiver
        self.report = report
        self.busy_until = 0.0
        self.lock = threading.Lock()

    def _due(self, nbytes: int) -> tuple[float, float]:
        latency, bandwidth = self.model.link(self.sender, self.receiver)
        now = time.monotonic()
        with self.lock:
            sent = max(now, self.busy_until) + (nbytes / bandwidth if bandwidth else 0.0)
            self.busy_until = sent
        return sent + latency, sent + latency - now

    def receive(self, payload: Payload) -> Pending[bool]:
        due, delay = self._due(payload.nbytes)
        self.report(payload, self.receiver, delay)
        deferred = _Deferred(lambda: self.inner.receive(payload))
        LinkScheduler.shared().at(due, deferred)
        return deferred

    def serve(self, round_: int, keys: tuple[str, ...]) -> Pending[Payload | None]:
        """The answer crosses the link back from the receiver (who serves) to us."""
        return _Answer(self.inner.serve(round_, keys), self.model, self.receiver, self.sender)

    def __getattr__(self, name: str) -> Any:  # control calls are small: no link time
        return getattr(self.inner, name)


class _Answer:
    """A pulled answer that reaches the puller after its link's time."""

    def __init__(self, inner: Pending[Any], model: Heterogeneity, sender: int, receiver: int):
        self.inner, self.model = inner, model
        self.sender, self.receiver = sender, receiver
        self.arrives: float | None = None

    def _arrival(self, answer: Any) -> float:
        if self.arrives is None:
            from ring_actors.delivery.payloads import Payload  # a client's path only

            nbytes = answer.nbytes if isinstance(answer, Payload) else 0
            self.arrives = time.monotonic() + self.model.hop_s(self.sender, self.receiver, nbytes)
        return self.arrives

    def done(self) -> bool:
        if not self.inner.done():
            return False
        try:
            return time.monotonic() >= self._arrival(self.inner.result(0))
        except Exception:  # noqa: BLE001 - an error is an answer too
            return True

    def result(self, timeout: float | None = None) -> Any:
        started = time.monotonic()
        answer = self.inner.result(timeout)
        wait = self._arrival(answer) - time.monotonic()
        if timeout is not None and wait > timeout - (time.monotonic() - started):
            raise TimeoutError("still on the link")
        time.sleep(max(0.0, wait))
        return answer
