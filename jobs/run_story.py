"""What happened in a run, in a few lines: the ring, each member lost and how fast the ring
healed, each joiner. Read from the run's own ``events.parquet``, so it tells any run, not
only the quickstart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

LOST = {"crash": "crashed", "hang": "hung", "client_error": "failed"}


def tell(summary: dict[str, Any]) -> str:
    """The ring's size and rounds, then one line per fault and per join, in time order."""
    events = _events(Path(summary.get("output_dir", "")))
    joined = sum(1 for e in events if e["kind"] == "join")
    lines = [
        f"ring: {summary['clients'] - joined} clients, {summary['mode']}, "
        f"{summary['rounds_completed']} rounds; live at the end: {summary['ring_order']}"
    ]
    bypassed = {e["client"]: e for e in events if e["kind"] == "bypass"}
    healed = [e for e in events if e["kind"] == "healed"]
    initialised = {e["client"]: e for e in events if e["kind"] == "join_initialised"}
    for event in events:
        kind, client = event["kind"], event["client"]
        if kind in LOST:
            line = f"{kind}: client {client} {LOST[kind]} after round {event['round']}"
            if client in bypassed and event.get("latency_s") is not None:
                line += f"; bypassed {event['latency_s']:.1f} s after its last sign of life"
            heal = next((h for h in healed if h["time_s"] >= event["time_s"]), None)
            if heal is not None and heal.get("latency_s") is not None and summary["ring_order"]:
                line += (
                    f"; ring healed {heal['latency_s']:.1f} s later "
                    "(every survivor past the bypass)"
                )
            lines.append(line)
        elif kind in ("join", "rejoin"):
            line = f"{kind}: client {client} {event['detail']}, first round {event['round']}"
            if client in initialised:
                line += f"; its start: {initialised[client]['detail']}"
            lines.append(line)
    return "\n".join(lines)


def _events(output_dir: Path) -> list[dict[str, Any]]:
    path = output_dir / "events.parquet"
    if not path.is_file():
        return []
    return sorted(pq.read_table(path).to_pylist(), key=lambda e: e["time_s"])
