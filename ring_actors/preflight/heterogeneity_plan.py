"""The heterogeneity a run will apply, drawn here exactly as every client draws it (the same
section, seed and client count), so a user sees the slowest client before the run starts."""

from __future__ import annotations

from ring_actors.config import Config
from ring_actors.heterogeneity.model import Heterogeneity

SHOWN_CLIENTS = 12  # speed factors listed one by one up to this many clients


def describe_heterogeneity(config: Config) -> list[str]:
    """Lines for the dry run: speeds, links and availability; none when all are uniform."""
    section, total = config.heterogeneity, config.total_clients
    model = Heterogeneity(section, config.experiment.seed, total)
    lines = []
    if any(factor != 1.0 for factor in model.factors):
        lines.append("speeds:    " + _speeds(model.factors))
    if model.links_apply:
        lines.append("links:     " + _links(model, total))
    offline = _offline(model, config)
    if offline:
        lines.append("offline:   " + offline)
    return lines


def _speeds(factors: list[float]) -> str:
    slowest = max(range(len(factors)), key=factors.__getitem__)
    shown = ", ".join(f"{c}: {f:.2f}" for c, f in enumerate(factors[:SHOWN_CLIENTS]))
    more = f", ... ({len(factors)} clients)" if len(factors) > SHOWN_CLIENTS else ""
    return (
        f"speed factor per client (1 = full speed) {shown}{more}; "
        f"slowest: client {slowest} at {factors[slowest]:.2f}x"
    )


def _links(model: Heterogeneity, total: int) -> str:
    pairs = [(a, b) for a in range(total) for b in range(total) if a != b]
    latencies = [model.link(a, b)[0] for a, b in pairs]
    bandwidths = [bw for a, b in pairs if (bw := model.link(a, b)[1]) is not None]
    text = f"latency {min(latencies) * 1e3:.1f}-{max(latencies) * 1e3:.1f} ms"
    if bandwidths:
        text += f", bandwidth {min(bandwidths) / 1e6:.3g}-{max(bandwidths) / 1e6:.3g} MB/s"
    return text + f" over {len(pairs)} directed links"


def _offline(model: Heterogeneity, config: Config) -> str:
    avail, total = config.heterogeneity.availability, config.total_clients
    parts = []
    traced = model.trace.offline
    if traced:
        spans = ", ".join(
            f"{c}: {sum(b - a for a, b in periods):.1f} s in {len(periods)} periods"
            for c, periods in sorted(traced.items())
        )
        parts.append(f"from the trace, {spans}")
    if avail.mean_online_s is not None:
        drawn = [c for c in (avail.clients or range(total)) if c not in traced]
        on, off = avail.mean_online_s, avail.mean_offline_s
        share = off / (on + off)
        parts.append(
            f"clients {_ids(drawn)} offline {100 * share:.0f}% of the time in the long run "
            f"(online ~Exp({on:g} s), then offline ~Exp({off:g} s))"
        )
    return "; ".join(parts)


def _ids(clients: list[int]) -> str:
    return ", ".join(map(str, clients)) if len(clients) <= SHOWN_CLIENTS else f"{len(clients)}"
