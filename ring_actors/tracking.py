"""MLflow logging in batches, and the run's output files (the output contract)."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

_MAX_BATCH = 1000  # MLflow's limit on metrics per log_batch call


def resolve_tracking_uri(configured: str | None, workdir: Path) -> str:
    """Config value, else ``MLFLOW_TRACKING_URI``, else a SQLite file in ``workdir``."""
    uri = configured or os.environ.get("MLFLOW_TRACKING_URI")
    return uri or f"sqlite:///{(workdir / 'mlflow.db').resolve()}"


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested config as dotted keys with string values, the shape MLflow params take."""
    flat: dict[str, str] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = json.dumps(value) if isinstance(value, (list, tuple)) else str(value)
    return flat


class Tracker:
    """One MLflow run, written only by the coordinator; metrics are buffered and sent in batches.

    Nothing touches MLflow until ``open``: importing it and creating a SQLite store take
    seconds, which the coordinator spends on its own thread while the ring starts.
    """

    def __init__(self, uri: str, experiment: str, run_name: str, run_id: str | None = None) -> None:
        """A new run, or with ``run_id`` the same run again (after a coordinator restart)."""
        self.uri = uri
        self.experiment = experiment
        self.run_name = run_name
        self.run_id = run_id
        self.client = None
        self._pending: list[tuple[str, float, int, int]] = []
        self._pending_lock = threading.Lock()  # the control path adds, a tracking thread sends
        self._opening = threading.Lock()

    def open(
        self, params: Mapping[str, str] | None = None, tags: Mapping[str, str] | None = None
    ) -> None:
        """Connect, and create the run (logging ``params`` and ``tags``) if it is new."""
        from mlflow.entities import Param, RunTag
        from mlflow.tracking import MlflowClient

        with self._opening:
            if self.client is not None:
                return
            client = MlflowClient(tracking_uri=self.uri)
            if self.run_id is None:
                found = client.get_experiment_by_name(self.experiment)
                experiment_id = (
                    found.experiment_id if found else client.create_experiment(self.experiment)
                )
                run_id = client.create_run(experiment_id, run_name=self.run_name).info.run_id
                items = [Param(k, v[:6000]) for k, v in (params or {}).items()]
                for start in range(0, len(items), 100):
                    client.log_batch(run_id, params=items[start : start + 100])
                tags = [RunTag(k, str(v)) for k, v in (tags or {}).items()]
                client.log_batch(run_id, tags=tags)
                self.run_id = run_id
            self.client = client

    def add_metrics(self, values: Mapping[str, float], step: int) -> None:
        now = int(time.time() * 1000)
        with self._pending_lock:
            self._pending.extend((k, float(v), now, step) for k, v in values.items())

    def flush(self) -> None:
        """Send what is buffered (once the run is open). A batch leaves the buffer only once
        MLflow took it, so a tracking server that is down loses nothing: the next flush
        sends it again."""
        if self.client is None:
            return
        from mlflow.entities import Metric

        while True:
            with self._pending_lock:
                batch = self._pending[:_MAX_BATCH]
            if not batch:
                return
            self.client.log_batch(self.run_id, metrics=[Metric(*m) for m in batch])
            with self._pending_lock:
                del self._pending[: len(batch)]

    def log_artifacts(self, directory: Path, private: tuple[str, ...] = ()) -> None:
        """Upload ``directory``, leaving out the entries named in ``private``."""
        self.open()
        for entry in sorted(directory.iterdir()):
            if entry.name in private:
                continue
            if entry.is_dir():
                self.client.log_artifacts(self.run_id, str(entry), artifact_path=entry.name)
            else:
                self.client.log_artifact(self.run_id, str(entry))

    def end(self, status: str = "FINISHED") -> None:
        self.open()
        self.flush()
        self.client.set_terminated(self.run_id, status=status)


def write_outputs(
    directory: Path,
    config: Mapping[str, Any],
    summary: Mapping[str, Any],
    metrics: list[dict[str, Any]],
    events: list[dict[str, Any]],
) -> None:
    """The contract files: config.yaml, summary.json, metrics.parquet, events.parquet."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.yaml").write_text(yaml.safe_dump(dict(config), sort_keys=False))
    (directory / "summary.json").write_text(json.dumps(summary, indent=2, default=float))
    pq.write_table(_table(metrics, METRIC_COLUMNS), directory / "metrics.parquet")
    pq.write_table(_table(events, EVENT_COLUMNS), directory / "events.parquet")


METRIC_COLUMNS = {"client": pa.int64(), "round": pa.int64(), "time_s": pa.float64()}
EVENT_COLUMNS = {
    "time_s": pa.float64(),
    "kind": pa.string(),
    "client": pa.int64(),
    "round": pa.int64(),
    "epoch": pa.int64(),
    "detail": pa.string(),
}


def _table(rows: list[dict[str, Any]], fixed: Mapping[str, pa.DataType]) -> pa.Table:
    """Rows as a table: ``fixed`` columns first, any other keys as float64 columns."""
    extra = sorted({k for row in rows for k in row} - set(fixed))
    schema = pa.schema([*fixed.items(), *[(k, pa.float64()) for k in extra]])
    columns = {name: [row.get(name) for row in rows] for name in schema.names}
    return pa.table(columns, schema=schema)
