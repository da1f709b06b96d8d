"""The config's ``heterogeneity`` section: speeds, links and availability, drawn or traced."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ring_actors.config.checks import ConfigError, check
from ring_actors.heterogeneity.trace_file import (
    MAX_COMPUTE_FACTOR,
    MAX_LATENCY_S,
    MAX_RUN_CLOCK_S,
    MIN_BANDWIDTH_BYTES_S,
    Trace,
    read_trace,
)

DISTRIBUTIONS = ("none", "lognormal")
# A lognormal spread of 3 already puts about 140x between the fastest and the slowest tenth;
# with it, exp(spread * z) stays finite for every z a draw can give (|z| < 9).
MAX_SPREAD = 3.0
# Off periods, and the spans online between them, average at least this long: one is applied
# at a round boundary, so much shorter ones would only be recorded, each as an event. They
# average at most MAX_RUN_CLOCK_S (a year): the bounds of every value are in trace_file.py.
MIN_MEAN_PERIOD_S = 0.1
MEAN_PERIOD = f"a number in [{MIN_MEAN_PERIOD_S:g}, {MAX_RUN_CLOCK_S:g}] (seconds)"
COMPUTE = "heterogeneity.compute"
LINKS = "heterogeneity.links"
AVAILABILITY = "heterogeneity.availability"
TRACE = "heterogeneity.trace"


@dataclass(frozen=True)
class ComputeSection:
    """Speed factors: a fixed list by client id (clients past its end: 1), or drawn; at most
    MAX_COMPUTE_FACTOR (a drawn one past it is capped there)."""

    factors: tuple[float, ...] = ()
    # lognormal: factor = exp(spread * |z|), z standard normal, seeded by experiment.seed;
    # the fastest client is 1. spread 1.4 puts about 10x between the fastest and slowest tenth.
    distribution: Literal["none", "lognormal"] = "none"
    spread: float = 1.0

    def __post_init__(self) -> None:
        bad = [f for f in self.factors if not 1 <= f <= MAX_COMPUTE_FACTOR]
        allowed = f"a list of numbers in [1, {MAX_COMPUTE_FACTOR:g}] (1 = full speed)"
        check(not bad, f"{COMPUTE}.factors", allowed, bad)
        _check_spread(self.spread, f"{COMPUTE}.spread")
        check(
            self.distribution in DISTRIBUTIONS,
            f"{COMPUTE}.distribution",
            "none or lognormal",
        )


@dataclass(frozen=True)
class LinksSection:
    """Every directed link's latency and bandwidth; drawn links vary around these. A hop is
    never held longer than MAX_LINK_DELAY_S, however far a draw or a payload takes it."""

    latency_s: float = 0.0
    bandwidth_bytes_s: float | None = None  # null: no transfer time
    # lognormal: each link's latency and bandwidth times exp(spread * z), seeded per link.
    distribution: Literal["none", "lognormal"] = "none"
    spread: float = 1.0

    def __post_init__(self) -> None:
        check(
            0 <= self.latency_s <= MAX_LATENCY_S,
            f"{LINKS}.latency_s",
            f"a number in [0, {MAX_LATENCY_S:g}] (seconds)",
            self.latency_s,
        )
        bw = self.bandwidth_bytes_s
        check(
            bw is None or bw >= MIN_BANDWIDTH_BYTES_S,
            f"{LINKS}.bandwidth_bytes_s",
            f"null or a number >= {MIN_BANDWIDTH_BYTES_S:g} (bytes/s)",
            bw,
        )
        _check_spread(self.spread, f"{LINKS}.spread")
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
            on is None or _is_mean_period(on),
            f"{AVAILABILITY}.mean_online_s",
            f"null or {MEAN_PERIOD}",
            on,
        )
        check(
            0 <= off <= MAX_RUN_CLOCK_S,
            f"{AVAILABILITY}.mean_offline_s",
            f"a number in [0, {MAX_RUN_CLOCK_S:g}] (seconds)",
            off,
        )
        if on is not None:
            check(
                _is_mean_period(off),
                f"{AVAILABILITY}.mean_offline_s",
                f"{MEAN_PERIOD} with mean_online_s",
                off,
            )


@dataclass(frozen=True)
class HeterogeneitySection:
    compute: ComputeSection = field(default_factory=ComputeSection)
    links: LinksSection = field(default_factory=LinksSection)
    availability: AvailabilitySection = field(default_factory=AvailabilitySection)
    trace: str | None = None  # a JSON trace file (format in ring_actors/heterogeneity/__init__.py)

    def __post_init__(self) -> None:
        if self.trace is not None:  # read here, so a wrong file stops the run before it starts
            self.read_trace()

    def read_trace(self) -> Trace:
        """The trace file, checked; a ConfigError names the key, the file and the entry."""
        assert self.trace is not None
        try:
            return read_trace(self.trace)
        except (OSError, ValueError) as err:
            raise ConfigError(f"{TRACE}: {self.trace}: {err}") from err

    def check_clients(self, total: int) -> None:
        """Every client id named anywhere must be one of the run's ``total`` clients."""
        named = {f"{AVAILABILITY}.clients": list(self.availability.clients)}
        if self.trace is not None:
            trace = self.read_trace()
            named[f"{TRACE}: {self.trace}: compute"] = list(trace.compute)
            named[f"{TRACE}: {self.trace}: links"] = [c for link in trace.links for c in link]
            named[f"{TRACE}: {self.trace}: availability"] = list(trace.offline)
        for key, ids in named.items():
            bad = sorted({c for c in ids if not 0 <= c < total})
            check(not bad, key, f"client ids in [0, {total})", bad)


def _is_mean_period(seconds: float) -> bool:
    return MIN_MEAN_PERIOD_S <= seconds <= MAX_RUN_CLOCK_S


def _check_spread(spread: float, key: str) -> None:
    check(0 < spread <= MAX_SPREAD, key, f"a number in (0, {MAX_SPREAD}]", spread)
