"""The coordinator's checkpoint: a versioned JSON record, data and never code.

A restarted coordinator reads it back to resume membership, results and its MLflow run.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ring_actors.storage.durable import write_atomic
from ring_actors.storage.run_folder import CheckpointError

VERSION = 1


@dataclass(frozen=True)
class CoordinatorRecord:
    """What a restarted coordinator needs: membership, results so far, and the MLflow run."""

    run_id: str | None
    table: dict[str, Any]
    elapsed_s: float  # seconds since the rounds began, when it was written
    rows: list[dict[str, Any]]
    events: list[dict[str, Any]]
    by_round: dict[int, dict[int, dict[str, float]]]
    rounds_logged: list[int]
    done: dict[int, dict[str, int]]
    errors: list[dict[str, Any]]
    hung: list[int]
    healing: list[tuple[float, int]]
    # Metrics queued for MLflow that it had not yet taken: sent again after a restart
    # (MLflow keeps one copy of a metric it is sent twice with the same timestamp).
    unsent_metrics: list[tuple[str, float, int, int]] = field(default_factory=list)
    # The wall clock when it was written: a coordinator Ray restarts mid-run adds the time
    # since (the clients trained on meanwhile); a record without it adds none.
    written_at: float | None = None


def write_record(path: Path, record: CoordinatorRecord) -> None:
    """Write atomically: a reader sees the old file or the new, never half of one."""
    write_atomic(path, json.dumps({"version": VERSION, **asdict(record)}))


def read_record(path: Path) -> CoordinatorRecord | None:
    """The last record, or None when there is none."""
    if not path.exists():
        return None
    raw = json.loads(path.read_text())
    if raw.pop("version", None) != VERSION:
        raise CheckpointError(f"{path}: not a version-{VERSION} coordinator checkpoint")
    raw["by_round"] = {
        int(r): {int(c): m for c, m in reports.items()} for r, reports in raw["by_round"].items()
    }
    raw["done"] = {int(c): d for c, d in raw["done"].items()}
    raw["healing"] = [tuple(h) for h in raw["healing"]]
    raw["unsent_metrics"] = [tuple(m) for m in raw.get("unsent_metrics", [])]
    return CoordinatorRecord(**raw)
