"""A run without MLflow (``tracking.enabled: false``, and the in-process ring).

The coordinator's parts hand it what they would log and it keeps none of it: the run's
folder holds everything the run measured, and nothing imports MLflow, which costs a
coordinator about 3 core-seconds to import and open.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ring_actors.coordinator.tracking import Row, Tracker


class Untracked:
    """The tracker's calls, each doing nothing; its run is none."""

    uri: str | None = None
    run_id: str | None = None  # a restore sets it from the record, which holds None

    def open(
        self, params: Mapping[str, str] | None = None, tags: Mapping[str, str] | None = None
    ) -> bool:
        return False

    def add_metrics(self, values: Mapping[str, float], step: int) -> None:
        """The folder's ``metrics.parquet`` holds them."""

    def unsent(self) -> list[Row]:
        return []

    def requeue(self, rows: list[Row]) -> None:
        """A record written with tracking on holds rows; with it off they have nowhere to go."""

    def log_artifacts(self, directory: Path, private: tuple[str, ...] = ()) -> None:
        """The folder is the run's only copy."""

    def end(self, status: str = "FINISHED") -> Path | None:
        return None


RunTracker = Tracker | Untracked
