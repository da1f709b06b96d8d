"""The run's contract files, written whole or not at all: config.yaml, summary.json,
metrics.parquet and events.parquet, with fixed columns first so readers never guess types."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from ring_actors.storage.durable import write_atomic
from ring_actors.storage.run_folder import RunFolder


def write_outputs(
    directory: Path,
    config: Mapping[str, Any],
    summary: Mapping[str, Any],
    metrics: list[dict[str, Any]],
    events: list[dict[str, Any]],
) -> None:
    """The contract files: config.yaml, summary.json, metrics.parquet, events.parquet."""
    directory.mkdir(parents=True, exist_ok=True)
    folder = RunFolder(directory)
    write_atomic(folder.config, yaml.safe_dump(dict(config), sort_keys=False))
    write_atomic(folder.summary, json.dumps(summary, indent=2, default=float))
    for path, rows, columns in (
        (folder.metrics, metrics, METRIC_COLUMNS),
        (folder.events, events, EVENT_COLUMNS),
    ):
        table = _table(rows, columns)
        write_atomic(path, lambda file, table=table: pq.write_table(table, file))


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
