"""The config's ``heterogeneity`` section: speeds, links and availability, drawn or traced."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ring_actors.config.checks import ConfigError, check
from ring_actors.heterogeneity.trace_file import read_trace

DISTRIBUTIONS = ("none", "lognormal")
COMPUTE = "heterogeneity.compute"
LINKS = "heterogeneity.links"
AVAILABILITY = "heterogeneity.availability"


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
        check(not bad, f"{COMPUTE}.factors", "a list of numbers >= 1 (1 = full speed)", bad)
        check(self.spread > 0, f"{COMPUTE}.spread", "a number > 0", self.spread)
        check(
            self.distribution in DISTRIBUTIONS,
            f"{COMPUTE}.distribution",
            "none or lognormal",
        )


@dataclass(frozen=True)
class LinksSection:
    """Every directed link's latency and bandwidth; drawn links vary around these."""

    latency_s: float = 0.0
    bandwidth_bytes_s: float | None = None  # null: no transfer time
    # lognormal: each link's latency and bandwidth times exp(spread * z), seeded per link.
    distribution: Literal["none", "lognormal"] = "none"
    spread: float = 1.0

    def __post_init__(self) -> None:
        check(self.latency_s >= 0, f"{LINKS}.latency_s", "a number >= 0", self.latency_s)
        bw = self.bandwidth_bytes_s
        check(
            bw is None or bw > 0,
            f"{LINKS}.bandwidth_bytes_s",
            "null or a number > 0",
            bw,
        )
        check(self.spread > 0, f"{LINKS}.spread", "a number > 0", self.spread)
        check(
            self.distribution in DISTRIBUTIONS,
            f"{LINKS}.distribution",
            "none or lognormal",
        )


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
        check(
            on is None or on > 0,
            f"{AVAILABILITY}.mean_online_s",
            "null or a number > 0",
            on,
        )
        check(off >= 0, f"{AVAILABILITY}.mean_offline_s", "a number >= 0", off)
        if on is not None:
            check(
                off > 0,
                f"{AVAILABILITY}.mean_offline_s",
                "a number > 0 with mean_online_s",
                off,
            )


@dataclass(frozen=True)
class HeterogeneitySection:
    compute: ComputeSection = field(default_factory=ComputeSection)
    links: LinksSection = field(default_factory=LinksSection)
    availability: AvailabilitySection = field(default_factory=AvailabilitySection)
    trace: str | None = None  # a JSON trace file (format in ring_actors/heterogeneity/__init__.py)

    def __post_init__(self) -> None:
        if self.trace is not None:
            try:  # read here, so a missing or malformed file stops the run before it starts
                read_trace(self.trace)
            except (OSError, ValueError) as err:
                raise ConfigError(f"heterogeneity.trace: {err}") from err

    def check_clients(self, total: int) -> None:
        """Every client id named anywhere must be one of the run's ``total`` clients."""
        named = {f"{AVAILABILITY}.clients": list(self.availability.clients)}
        if self.trace is not None:
            trace = read_trace(self.trace)
            named["heterogeneity.trace"] = [
                *trace.compute,
                *trace.offline,
                *(c for link in trace.links for c in link),
            ]
        for key, ids in named.items():
            bad = sorted({c for c in ids if not 0 <= c < total})
            check(not bad, key, f"client ids in [0, {total})", bad)
