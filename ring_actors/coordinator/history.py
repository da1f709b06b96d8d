"""The coordinator's history (result rows, events, per-round reports) as an append-only log.

Rewriting all of it into the checkpoint twice a second, under the coordinator's lock, grows
with the run and stalls every RPC; appending what is new costs only what is new. A kill in
the middle of an append leaves a torn last line, which a reader skips.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ring_actors.storage.durable import fsync_dir

log = logging.getLogger(__name__)


@dataclass
class History:
    rows: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    by_round: dict[int, dict[int, dict[str, float]]] = field(default_factory=dict)


class HistoryLog:
    """Entries queued by the coordinator, appended (and fsynced) on ``flush``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.unwritten: list[dict[str, Any]] = []

    def row(self, row: dict[str, Any]) -> None:
        self.unwritten.append({"kind": "row", "entry": row})

    def event(self, event: dict[str, Any]) -> None:
        self.unwritten.append({"kind": "event", "entry": event})

    def report(self, client_id: int, round_: int, metrics: dict[str, float]) -> None:
        entry = {"client": client_id, "round": round_, "metrics": metrics}
        self.unwritten.append({"kind": "report", "entry": entry})

    def flush(self) -> None:
        """Append what is queued; on failure it stays queued for the next flush."""
        if not self.unwritten:
            return
        text = "".join(json.dumps(e, default=float) + "\n" for e in self.unwritten)
        new = not self.path.exists()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        if new:
            fsync_dir(self.path.parent)
        self.unwritten.clear()


def read_history(path: Path) -> History:
    """Everything appended to ``path``; a torn line (a kill mid-append) is skipped."""
    history = History()
    if not path.exists():
        return history
    for number, line in enumerate(path.read_text().splitlines(), 1):
        try:
            record = json.loads(line)
            kind, entry = record["kind"], record["entry"]
        except (ValueError, KeyError, TypeError):
            log.warning("%s line %d is torn: skipped", path, number)
            continue
        if kind == "row":
            history.rows.append(entry)
        elif kind == "event":
            history.events.append(entry)
        elif kind == "report":
            reports = history.by_round.setdefault(int(entry["round"]), {})
            reports[int(entry["client"])] = entry["metrics"]
    return history
