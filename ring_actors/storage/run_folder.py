"""Every file a run writes, named once.

The driver, the coordinator, the clients, the report, the sweep and the command line all find
a run's files through :class:`RunFolder`, so renaming one is a change in one place.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


class CheckpointError(ValueError):
    """A checkpoint file that this version cannot read."""


class FileIn:
    """A run folder's attribute that reads as the path of one of its files."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, folder: RunFolder, owner: type | None = None) -> Path:
        return folder.path / self.name


@dataclass(frozen=True)
class RunFolder:
    """One run's output folder and the names of what it holds."""

    path: Path

    CONFIG = "config.yaml"  # the resolved config
    SUMMARY = "summary.json"  # accuracies, traffic, faults, recovery, the MLflow run
    METRICS = "metrics.parquet"  # one row per client per evaluated round
    EVENTS = "events.parquet"  # membership events
    COORDINATOR = "coordinator.json"  # what a restarted coordinator resumes from
    HISTORY = "coordinator.history.jsonl"  # its rows, events and reports, appended
    UNSENT = "unsent_metrics.jsonl"  # metrics MLflow never took, one per line
    CLIENTS = "clients"  # the clients' private checkpoints
    PARTITION = "partition.json"  # every client's train and test indices (data.partition.kind file)
    CLIENT_ERRORS = "client_errors.log"  # the traceback of each client round that raised
    CURVES = "curves.png"  # Local-T and Global-T by round, drawn at the end
    TIMELINE = "timeline.png"  # each client's rounds over wall time, with membership events
    DRIVER_FAULTS = "driver_faults.json"  # the plan's driver-side entries, each noted as applied

    PRIVATE = (CLIENTS, COORDINATOR, HISTORY, DRIVER_FAULTS)  # only the run reads them back
    PUBLISHED = (SUMMARY, CONFIG, METRICS, EVENTS)  # what a report or MLflow copies

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    config = FileIn(CONFIG)
    summary = FileIn(SUMMARY)
    metrics = FileIn(METRICS)
    events = FileIn(EVENTS)
    coordinator_record = FileIn(COORDINATOR)
    coordinator_history = FileIn(HISTORY)
    driver_faults = FileIn(DRIVER_FAULTS)
    unsent_metrics = FileIn(UNSENT)
    partition = FileIn(PARTITION)
    clients = FileIn(CLIENTS)

    def client_checkpoint(self, client_id: int) -> Path:
        return self.checkpoint_in(self.clients, client_id)

    @staticmethod
    def checkpoint_in(clients: Path, client_id: int) -> Path:
        """A client's checkpoint in a clients folder (which a cluster may place elsewhere)."""
        return clients / f"client-{client_id}.pt"

    @staticmethod
    def failed_starts_in(clients: Path, client_id: int) -> Path:
        """How many of a client's starts the fault plan's ``fail_start`` has failed so far."""
        return clients / f"client-{client_id}.failed-starts"

    def holds_run(self) -> bool:
        """Whether a run was started here (its coordinator wrote a record)."""
        return self.coordinator_record.exists()
