"""What every benchmark needs: where results go, how they are written, memory probes, and a
config from a base mapping plus dotted overrides."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ring_actors.config import Config

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"


def write_json(path: Path, record: Any, indent: int = 1) -> None:
    """Write a result whole: called after every run, so a later failure keeps what finished."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=indent, default=float) + "\n")


def memory_kb(pid: int | str = "self") -> dict[str, int] | None:
    """A process's ``Pss``, private (``Uss``) and ``Rss`` memory in kB from
    ``/proc/PID/smaps_rollup``, or None once the process is gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as handle:
            fields = dict(line.split(":", 1) for line in handle if ":" in line)
    except (OSError, ValueError):
        return None

    def kb(name: str) -> int:
        return int(fields.get(name, "0 kB").split()[0])

    return {
        "Pss": kb("Pss"),
        "Uss": kb("Private_Clean") + kb("Private_Dirty"),
        "Rss": kb("Rss"),
    }


def uss_mb(pid: int | str = "self") -> float:
    """Private memory of a process, in MB (0 once it is gone)."""
    return (memory_kb(pid) or {"Uss": 0})["Uss"] / 1024


def config_from_overrides(base: Mapping[str, Any], overrides: Sequence[str] = ()) -> Config:
    """A validated config: ``base`` with each ``dotted.key=value`` applied."""
    from ring_actors.config import apply_overrides, config_from_dict

    return config_from_dict(apply_overrides(dict(base), overrides))
