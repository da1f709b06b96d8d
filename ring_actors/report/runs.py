"""Run directories (the output contract of ``jobs.train``) loaded into typed records."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import yaml

from ring_actors.storage.run_folder import RunFolder

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EvalRow:
    """One client's evaluation in one round (a row of ``metrics.parquet``)."""

    client: int
    round: int
    time_s: float
    local_acc: float | None
    global_acc: float | None


@dataclass(frozen=True)
class Event:
    """One membership event (a row of ``events.parquet``); ``client`` is -1 for ring-wide."""

    time_s: float
    kind: str
    client: int
    round: int
    detail: str
    duration_s: float = 0.0  # a delay or an offline period: how long it lasted


@dataclass(frozen=True)
class Run:
    """One finished (or stopped) experiment, as its output directory describes it."""

    path: Path
    config: Mapping[str, Any]
    summary: Mapping[str, Any]
    rows: tuple[EvalRow, ...]
    events: tuple[Event, ...]

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def method(self) -> str:
        return str(self.summary.get("algorithm") or self.config["algorithm"]["name"])

    @property
    def dataset(self) -> str:
        return str(self.summary.get("dataset") or self.config["data"]["dataset"])

    @property
    def partition(self) -> str:
        return partition_label(self.config.get("data", {}).get("partition", {}))

    @property
    def seed(self) -> int:
        return int(self.config.get("experiment", {}).get("seed", 0))

    @property
    def rounds_planned(self) -> int:
        return int(self.config.get("experiment", {}).get("rounds", 0))

    @property
    def rounds_completed(self) -> int:
        return int(self.summary.get("rounds_completed", 0))

    @property
    def partial(self) -> str | None:
        """Why the run's numbers do not cover the whole plan, or None when they do."""
        if self.summary.get("stopped"):
            return f"stopped: {self.summary['stopped']}"
        # As many rounds as its time budget let it run is the plan (a summary written
        # before ``ended_because`` existed says so by its config's budget).
        ended = self.summary.get("ended_because")
        budgeted = self.config.get("experiment", {}).get("time_budget_s") is not None
        as_planned = ended == "time_budget" or (ended is None and budgeted)
        if self.rounds_completed < self.rounds_planned and not as_planned:
            return f"{self.rounds_completed} of {self.rounds_planned} rounds"
        return None


def partition_label(partition: Mapping[str, Any]) -> str:
    """The papers' short names: ``iid``, ``dir β=0.1`` (Dirichlet), ``shard s=2``."""
    kind = partition.get("kind", "shard")
    if kind == "dirichlet":
        return f"dir β={partition.get('beta')}"
    if kind == "shard":
        return f"shard s={partition.get('classes_per_client')}"
    return str(kind)


def find_runs(paths: Iterable[Path]) -> list[Path]:
    """Run directories among ``paths``: each one itself, or every run found beneath it."""
    found: list[Path] = []
    for path in paths:
        if RunFolder(path).summary.is_file():
            found.append(path)
        elif path.is_dir():
            found.extend(sorted(p.parent for p in path.rglob(RunFolder.SUMMARY)))
        else:
            raise FileNotFoundError(f"{path}: not a run directory nor a folder of runs")
    return list(dict.fromkeys(found))


def load_run(path: Path) -> Run:
    """Read a run directory; a missing Parquet table counts as empty."""
    folder = RunFolder(path)
    summary = json.loads(folder.summary.read_text())
    config_file = folder.config
    config = yaml.safe_load(config_file.read_text()) if config_file.is_file() else {}
    return Run(
        path=path,
        config=config or {},
        summary=summary,
        rows=tuple(_eval_row(r) for r in _records(folder.metrics)),
        events=tuple(_event(r) for r in _records(folder.events)),
    )


def load_runs(paths: Iterable[Path]) -> list[Run]:
    """Every run that reads whole; one with a torn file (a run killed while an older version
    rewrote it in place) is left out with a warning, not the whole report."""
    runs = []
    for path in find_runs(paths):
        try:
            runs.append(load_run(path))
        except (ValueError, OSError, yaml.YAMLError) as err:  # JSON, Parquet and YAML errors
            log.warning("%s left out of the report: a torn or unreadable file (%s)", path, err)
    return runs


def survey(paths: Iterable[Path]) -> tuple[list[Run], list[tuple[Path, str]]]:
    """The runs among ``paths`` (as :func:`find_runs`), and every folder left out, with why:
    a folder that is not a run nor holds one, or a run whose files cannot be read."""
    paths = list(paths)
    runs: list[Run] = []
    skipped = skipped_folders(paths)
    for path in find_runs(paths):
        try:
            runs.append(load_run(path))
        except (OSError, ValueError, KeyError, TypeError) as err:
            skipped.append((path, f"unreadable: {type(err).__name__}: {err}"))
    return runs, skipped


def skipped_folders(paths: Iterable[Path]) -> list[tuple[Path, str]]:
    """Folders beneath ``paths`` holding no run: neither one themselves nor any below them."""
    skipped: list[tuple[Path, str]] = []
    for root in paths:
        if not root.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            here = Path(dirpath)
            if RunFolder.SUMMARY in filenames:
                dirnames.clear()  # a run: its own folders (checkpoints) are part of it
                continue
            if here == root or next(here.rglob(RunFolder.SUMMARY), None) is not None:
                continue  # a folder of runs
            why = (
                f"{RunFolder.CONFIG} but no {RunFolder.SUMMARY}: a launch that never started, "
                "or a run still starting"
                if RunFolder.CONFIG in filenames
                else f"no {RunFolder.SUMMARY}: not a run"
            )
            skipped.append((here, why))
            dirnames.clear()
    return skipped


def _records(path: Path) -> list[dict[str, Any]]:
    return pq.read_table(path).to_pylist() if path.is_file() else []


def _eval_row(record: Mapping[str, Any]) -> EvalRow:
    return EvalRow(
        client=int(record["client"]),
        round=int(record["round"]),
        time_s=float(record["time_s"]),
        local_acc=_float(record.get("local_acc")),
        global_acc=_float(record.get("global_acc")),
    )


def _event(record: Mapping[str, Any]) -> Event:
    return Event(
        time_s=float(record["time_s"]),
        kind=str(record["kind"]),
        client=int(record["client"]),
        round=int(record["round"]),
        detail=str(record.get("detail") or ""),
        duration_s=_duration(record.get("duration_s")),
    )


def _duration(value: Any) -> float:
    """An event's duration; events without one (most) read as 0."""
    return 0.0 if value is None or value != value else float(value)


def _float(value: Any) -> float | None:
    return None if value is None else float(value)
