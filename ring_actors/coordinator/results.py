"""What a run has produced so far: round reports, evaluated rows, events, client errors and
each client's final counts, on one clock. The coordinator is the only writer, under its lock."""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

from ring_actors.coordinator.history import HistoryLog
from ring_actors.coordinator.run_summary import round_means
from ring_actors.delivery.event_kinds import EventKind

MAX_EVENTS = 100_000  # events kept for the summary; a long faulty run must not grow without end


class Results:
    """A run's results, kept until the run is finalized; what goes to MLflow is returned to
    the caller, which owns the tracker. Each new result is also queued for ``history``, the
    append-only log a restarted coordinator reads back."""

    def __init__(self, history: HistoryLog) -> None:
        self.history = history
        self.started_at = time.monotonic()
        self.rows: list[dict[str, Any]] = []  # one per client per evaluated round
        self.events: list[dict[str, Any]] = []
        self.by_round: dict[int, dict[int, dict[str, float]]] = defaultdict(dict)
        self.rounds_logged: set[int] = set()  # rounds whose client means went to MLflow
        self.done: dict[int, dict[str, int]] = {}  # each finished client's final counts
        self.errors: list[dict[str, Any]] = []  # client failures, tracebacks included

    def now(self) -> float:
        """Seconds since the rounds began: the events' clock."""
        return time.monotonic() - self.started_at

    def event(
        self,
        kind: EventKind,
        client_id: int,
        round_: int,
        epoch: int,
        detail: str,
        **measured: float,
    ) -> None:
        if len(self.events) >= MAX_EVENTS:
            return
        self.events.append(
            {
                "time_s": self.now(),
                "kind": EventKind(kind).value,  # an unknown kind fails here, not in a report
                "client": client_id,
                "round": round_,
                "epoch": epoch,
                "detail": detail,
                **measured,
            }
        )
        self.history.event(self.events[-1])

    def has_round(self, client_id: int, round_: int) -> bool:
        return client_id in self.by_round.get(round_, {})

    def record_round(
        self, client_id: int, round_: int, metrics: dict[str, float]
    ) -> dict[str, float]:
        """One client's report of one round; the metrics to log (none for a repeated one).
        A round reported again with the scores its report lacked (a client scores its last
        model when its time budget ends) gets them, and its row: no second round."""
        held = self.by_round.get(round_, {}).get(client_id)
        if held is not None and (_scored(held) or not _scored(metrics)):
            return {}  # idempotent under retries
        self.by_round[round_][client_id] = metrics
        self.history.report(client_id, round_, metrics)
        if _scored(metrics):
            row = {"client": client_id, "round": round_, "time_s": self.now(), **metrics}
            self.rows.append(row)
            self.history.row(row)
        new = {k: v for k, v in metrics.items() if held is None or k not in held}
        return {f"client_{client_id}/{k}": v for k, v in new.items()}

    def reports(self) -> list[dict[str, float]]:
        return [m for reports in self.by_round.values() for m in reports.values()]

    def latest_means(self) -> dict[str, float]:
        """Client means of the newest round every live member has reported."""
        if not self.rounds_logged:
            return {}
        round_ = max(self.rounds_logged)
        means = round_means(self.by_round[round_].values())
        keys = ("local_acc_mean", "global_acc_mean", "loss_mean")
        return {"round": round_, **{k: means[k] for k in keys if k in means}}

    def full_round_means(self, live: set[int] | None = None) -> list[tuple[int, dict[str, float]]]:
        """Each round's client means, once: when every live member has reported it, or, with
        ``live`` None (the run is over), whatever was reported. (round, means) to log."""
        ready = []
        for round_ in sorted(self.by_round):
            reports = self.by_round[round_]
            if round_ in self.rounds_logged or (live is not None and not live <= set(reports)):
                continue
            self.rounds_logged.add(round_)
            ready.append((round_, round_means(reports.values())))
        return ready


def _scored(metrics: dict[str, float]) -> bool:
    """An evaluated round's report: it carries the model's scores."""
    return any(k.startswith("local_") for k in metrics)
