"""The coordinator's checkpoint as a versioned JSON record: data only, never code.

Reading it cannot execute anything (unlike a pickle), so a checkpoint directory on a shared
filesystem is not a way into every node; a record of another version is refused by name.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

VERSION = 1


class CheckpointError(ValueError):
    """A checkpoint file that this version cannot read."""


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


def write_record(path: Path, record: CoordinatorRecord) -> None:
    """Write atomically: a reader sees the old file or the new, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps({"version": VERSION, **asdict(record)}))
    os.replace(tmp, path)


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
    return CoordinatorRecord(**raw)
