"""Checkpoints that are data, not code.

The coordinator's is a versioned JSON record. A client's private state is a torch file read
with torch's weights-only loader and an allowlist of the project's own classes. Neither can
run code when read, so a checkpoint directory on a shared filesystem is not a way into
every node.
"""

from __future__ import annotations

import importlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

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
    # Metrics queued for MLflow that it had not yet taken: sent again after a restart
    # (MLflow keeps one copy of a metric it is sent twice with the same timestamp).
    unsent_metrics: list[tuple[str, float, int, int]] = field(default_factory=list)


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
    raw["unsent_metrics"] = [tuple(m) for m in raw.get("unsent_metrics", [])]
    return CoordinatorRecord(**raw)


# What a client checkpoint may name: the project's own classes, torch modules and generators.
# Anything else (``os.system``, ``builtins.eval``, ...) is refused before a byte is unpickled.
CLIENT_GLOBAL_PREFIXES = ("ring_actors.", "torch.nn.modules.")
CLIENT_GLOBALS = frozenset({"torch._C.Generator", "random.Random"})


def load_client_state(path: Path, device: torch.device) -> dict[str, Any]:
    """A client checkpoint, unpickled with torch's weights-only loader and an allowlist.

    The loader constructs only the globals named here; a file that names any other is
    refused with the names it holds.
    """
    names = torch.serialization.get_unsafe_globals_in_checkpoint(str(path))
    refused = [n for n in names if not n.startswith(CLIENT_GLOBAL_PREFIXES)]
    refused = [n for n in refused if n not in CLIENT_GLOBALS]
    if refused:
        raise CheckpointError(f"{path}: names {refused[:3]}, which no client checkpoint holds")
    allowed = [_resolve(name) for name in names]
    with torch.serialization.safe_globals(allowed):
        return torch.load(path, map_location=device, weights_only=True)


def _resolve(name: str) -> Any:
    module, _, attribute = name.rpartition(".")
    return getattr(importlib.import_module(module), attribute)
