"""Checkpoints that are data, not code.

The coordinator's is a versioned JSON record. A client's private state is a torch file read
with torch's weights-only loader and an allowlist of classes (the project's own, torch's
modules, a plug-in's method and model; never a function). Neither can run code when read,
so a checkpoint directory on a shared filesystem is not a way into every node.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from ring_actors.algorithms.base import Algorithm, AlgorithmOptions

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


# What a client checkpoint may name: classes only (a function such as ``os.system`` or one of
# the project's own could be called by the unpickler with arguments of the file's choosing),
# the project's own, torch's modules and generators, and a plug-in's method, options and models.
CLIENT_CLASS_MODULES = ("ring_actors.", "torch.nn.modules.")
CLIENT_CLASSES = frozenset({"torch._C.Generator", "random.Random"})


def load_client_state(path: Path, device: torch.device) -> dict[str, Any]:
    """A client checkpoint, unpickled with torch's weights-only loader and an allowlist.

    The loader constructs only the classes allowed here; a file that names anything else is
    refused with the names it holds, before a byte of it is unpickled.
    """
    names = torch.serialization.get_unsafe_globals_in_checkpoint(str(path))
    allowed = {name: _allowed_class(name) for name in names}
    refused = [name for name, cls in allowed.items() if cls is None]
    if refused:
        raise CheckpointError(f"{path}: names {refused[:3]}, which no client checkpoint holds")
    with torch.serialization.safe_globals(list(allowed.values())):
        return torch.load(path, map_location=device, weights_only=True)


def _allowed_class(name: str) -> type | None:
    """The class ``name`` stands for if a client checkpoint may hold it, else None.

    Only modules already imported are looked in: reading a file never imports one (the
    client imported a plug-in's module when it built its method).
    """
    module_name, _, attribute = name.rpartition(".")
    module = sys.modules.get(module_name)
    found = getattr(module, attribute, None) if module is not None else None
    if not isinstance(found, type):
        return None
    if name in CLIENT_CLASSES or name.startswith(CLIENT_CLASS_MODULES):
        return found
    return found if issubclass(found, (Algorithm, AlgorithmOptions, torch.nn.Module)) else None
