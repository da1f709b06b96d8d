"""A heterogeneity trace file: per-client speeds, per-link latency and bandwidth, offline spans."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def _must(ok: bool, key: str, allowed: str, value: Any = ...) -> None:
    """A ValueError naming the entry; the section that reads the file adds its key."""
    if not ok:
        got = "" if value is ... else f", got {value!r}"
        raise ValueError(f"{key}: must be {allowed}{got}")


@dataclass(frozen=True)
class Trace:
    compute: dict[int, float]
    links: dict[tuple[int, int], tuple[float | None, float | None]]  # latency, bandwidth
    offline: dict[int, list[tuple[float, float]]]


def read_trace(path: str | Path) -> Trace:
    """Parse and check a trace file; ValueError names the entry that is wrong."""
    data = json.loads(Path(path).read_text())
    _must(isinstance(data, dict), "trace", "a JSON object", type(data).__name__)
    unknown = set(data) - {"compute", "links", "latency_s", "bandwidth_bytes_s", "availability"}
    _must(not unknown, "trace", "keys among compute, links, latency_s, bandwidth_bytes_s, "
          "availability", sorted(unknown))  # fmt: skip
    compute = {int(c): float(f) for c, f in (data.get("compute") or {}).items()}
    bad = {c: f for c, f in compute.items() if not f >= 1}
    _must(not bad, "trace.compute", "speed factors >= 1", bad)
    links: dict[tuple[int, int], tuple[float | None, float | None]] = {}
    for name in ("latency_s", "bandwidth_bytes_s"):
        matrix = data.get(name)
        if matrix is None:
            continue
        _must(isinstance(matrix, list), f"trace.{name}", "a matrix (list of rows)")
        for a, row in enumerate(matrix):
            for b, value in enumerate(row):
                if a != b:
                    lat, bw = links.get((a, b), (None, None))
                    links[(a, b)] = (float(value), bw) if name == "latency_s" else (lat, value)
    for entry in data.get("links") or []:
        _must({"from", "to"} <= set(entry), "trace.links[]", "entries with from and to", entry)
        key = (int(entry["from"]), int(entry["to"]))
        lat, bw = links.get(key, (None, None))
        links[key] = (entry.get("latency_s", lat), entry.get("bandwidth_bytes_s", bw))
    for key, (lat, bw) in links.items():
        _must(lat is None or lat >= 0, f"trace link {key}", "a latency_s >= 0", lat)
        _must(bw is None or bw > 0, f"trace link {key}", "a bandwidth_bytes_s > 0", bw)
    offline: dict[int, list[tuple[float, float]]] = {}
    for client, periods in (data.get("availability") or {}).items():
        spans = sorted((float(a), float(b)) for a, b in periods)
        bad_spans = [s for s in spans if not 0 <= s[0] < s[1]]
        _must(not bad_spans, f"trace.availability.{client}", "[from_s, to_s] with from < to")
        offline[int(client)] = spans
    return Trace(compute, links, offline)
