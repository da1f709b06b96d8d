"""A run's summary from the facts the coordinator recorded: accuracies (at the end and over
the last ten evaluated rounds, as the papers quote them), traffic, faults and recovery."""

from __future__ import annotations

import logging
import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ring_actors.config import Config
from ring_actors.delivery.event_kinds import EventKind

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunFacts:
    """What the summary is computed from; all of it is recorded by the coordinator."""

    members: int
    rounds_completed: int
    ring_order: list[int]
    rows: list[dict[str, Any]]  # evaluated rounds, one per client and round
    reports: list[dict[str, float]]  # every round's metrics, evaluated or not
    done: list[dict[str, int]]  # each finished client's hops, bytes and lost payloads
    events: list[dict[str, Any]]
    stop_reason: str | None
    finished: bool  # every live member ended its rounds (all of them, or its time budget's)
    mlflow: dict[str, Any]
    # The hops and bytes of clients that never reported done (a crash), from their rounds.
    unfinished_traffic: list[dict[str, float]] = field(default_factory=list)


def summarise_run(config: Config, facts: RunFacts, wall_s: float) -> dict[str, Any]:
    last_eval: dict[int, dict[str, float]] = {}
    for row in facts.rows:  # rows arrive in round order per client; keep each one's latest
        last_eval[row["client"]] = row
    traffic = [*facts.done, *facts.unfinished_traffic]
    hops = sum(d["hops"] for d in traffic)
    sent = sum(d["bytes_sent"] for d in traffic)
    samples = sum(m.get("samples", 0.0) for m in facts.reports)
    per_round = statistics.fmean([m.get("bytes_sent", 0.0) for m in facts.reports] or [0.0])
    kinds = [e["kind"] for e in facts.events]
    detected = [
        e["latency_s"] for e in facts.events if e["kind"] in (EventKind.CRASH, EventKind.HANG)
    ]
    healed = [e["latency_s"] for e in facts.events if e["kind"] == EventKind.HEALED]
    return {
        "algorithm": config.algorithm.name,
        "dataset": config.data.dataset,
        "clients": facts.members,
        "rounds_completed": facts.rounds_completed,
        "mode": config.schedule.mode,
        "topology": config.topology.kind,
        "local_acc": _stat(last_eval, "local_acc"),
        "global_acc": _stat(last_eval, "global_acc"),
        # The papers quote the mean of the last 10 evaluated rounds as well as the end.
        "local_acc_last10": _last_mean(facts.rows, "local_acc", 10),
        "global_acc_last10": _last_mean(facts.rows, "global_acc", 10),
        "mb_per_round_per_client": per_round / 1e6,
        "bytes_per_hop": sent / hops if hops else 0.0,
        "hops": hops,
        "bytes_total": sent,
        "events": {
            "crashes": kinds.count(EventKind.CRASH),
            "hangs": kinds.count(EventKind.HANG),
            "errors": kinds.count(EventKind.CLIENT_ERROR),
            "bypasses": kinds.count(EventKind.BYPASS),
            "joins": kinds.count(EventKind.JOIN),
            "rejoins": kinds.count(EventKind.REJOIN),
            "lost_payloads": sum(d["lost"] for d in facts.done),
        },
        # Seconds from a bypassed member's last sign of life to its bypass, and from the
        # bypass until every survivor finished a round begun after it.
        "recovery": {"detection_s": detected, "heal_s": healed},
        "stopped": facts.stop_reason,
        "ended_because": ended_because(config, facts),
        "wall_s": wall_s,
        "samples_per_s": samples / wall_s if wall_s > 0 else 0.0,
        "ring_order": facts.ring_order,
        "mlflow": facts.mlflow,
    }


def ended_because(config: Config, facts: RunFacts) -> str | None:
    """Why the run ended: ``rounds`` (all of them done), ``time_budget``
    (``experiment.time_budget_s`` ran out first), ``stopped`` (the reason is ``stopped``);
    None while it goes on and when it was cut short (its driver killed or interrupted),
    which ``--resume`` continues."""
    if facts.stop_reason is not None:
        return "stopped"
    if not facts.finished:
        return None
    if facts.rounds_completed >= config.experiment.rounds:
        return "rounds"
    return "time_budget"  # a client ends its rounds early for nothing else


def run_level_metrics(summary: dict[str, Any]) -> dict[str, float]:
    """The figures a person looks for first, named so MLflow lists them before the
    per-round and per-client ones (capitals sort first): the client means at the end, in
    percent as the tables print them, and the bytes one hop carried on average."""
    return {
        "Local-T": 100 * summary["local_acc"]["mean"],
        "Global-T": 100 * summary["global_acc"]["mean"],
        "Bytes per hop": summary["bytes_per_hop"],
    }


def draw_run_figures(output_dir: Path) -> None:
    """The run's curves and ring timeline in its folder; a figure that fails costs the run
    nothing but the figure."""
    try:
        from ring_actors.report.run_figures import write_run_figures  # matplotlib: at the end

        write_run_figures(output_dir)
    except Exception:
        log.exception("drawing the run's figures failed; its tables are written")


def round_means(reports: Iterable[dict[str, float]]) -> dict[str, float]:
    """Mean over clients of every metric, as ``<name>_mean``."""
    values: dict[str, list[float]] = defaultdict(list)
    for metrics in reports:
        for key, value in metrics.items():
            values[key].append(value)
    return {f"{k}_mean": statistics.fmean(v) for k, v in values.items()}


def _last_mean(rows: list[dict[str, Any]], key: str, count: int) -> float:
    """Client mean of each client's mean ``key`` over its last ``count`` evaluated rounds."""
    by_client: dict[int, list[tuple[int, float]]] = defaultdict(list)
    for row in rows:
        if key in row:
            by_client[row["client"]].append((row["round"], row[key]))
    means = [
        statistics.fmean(v for _, v in sorted(values)[-count:]) for values in by_client.values()
    ]
    return statistics.fmean(means) if means else 0.0


def _stat(rows: dict[int, dict[str, float]], key: str) -> dict[str, Any]:
    per_client = {str(c): row[key] for c, row in sorted(rows.items()) if key in row}
    values = list(per_client.values())
    return {
        "mean": statistics.fmean(values) if values else 0.0,
        "std": statistics.pstdev(values) if len(values) > 1 else 0.0,
        "per_client": per_client,
    }
