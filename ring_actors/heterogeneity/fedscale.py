"""FedScale's published device traces, turned into this project's heterogeneity trace.

FedScale (github.com/SymbioticLab/FedScale, folder ``benchmark/dataset/data/device_info/``)
publishes measured device data for hundreds of thousands of mobile clients, as two pickled
dicts keyed by FedScale's client id:

- ``client_device_capacity``: ``{id: {"computation": c, "communication": b}}``, ``c`` the
  device's inference latency in milliseconds per sample (FedScale takes a training step as
  three of them), ``b`` its bandwidth in kbit/s;
- ``client_behave_trace``: ``{id: {"active": [...], "inactive": [...], "finish_time": t,
  "duration": d, "model": name}}``; the device is online from ``active[i]`` to
  ``inactive[i]`` (seconds), and the pattern repeats every ``finish_time`` seconds.

:func:`convert` picks ``clients`` of them (seeded) and gives, for the run's ids 0, 1, ...:
speed factors (latency over the fastest picked one's, so the fastest is 1), each client's
bandwidth on every link it sends over, and its offline periods over ``horizon_s`` with times
multiplied by ``time_scale`` (a day of trace in minutes of run: ``time_scale`` 1/1440).

    python -m ring_actors.heterogeneity.fedscale --capacity client_device_capacity \\
        --behave client_behave_trace --clients 12 --time-scale 0.001 --out trace.json

then ``heterogeneity.trace: trace.json``.
"""

from __future__ import annotations

import argparse
import json
import pickle
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ring_actors.heterogeneity.trace_file import MAX_RUN_CLOCK_S

DEFAULT_HORIZON_S = 3600.0  # off periods are written up to this far into the run


class _PlainData(pickle.Unpickler):
    """A pickle of dicts, lists, strings and numbers only: unpickling runs no code."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"not plain data: it names {module}.{name}")


def read_pickle(path: str | Path) -> dict[Any, Any]:
    """One of FedScale's device-info files, as the dict it holds."""
    with open(path, "rb") as handle:
        data = _PlainData(handle).load()
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a dict keyed by client id, got {type(data).__name__}")
    return data


def offline_spans(
    behave: Mapping[str, Any], time_scale: float, horizon_s: float
) -> list[list[float]]:
    """[from_s, to_s) spans the device is offline, on the run's clock, up to ``horizon_s``:
    the complement of its online spans, repeated every ``finish_time``."""
    period = float(behave["finish_time"])
    online = sorted(zip(map(float, behave["active"]), map(float, behave["inactive"]), strict=True))
    if period <= 0 or not online:
        raise ValueError("a behaviour trace needs a finish_time > 0 and an online span")
    spans: list[list[float]] = []
    offline_from = 0.0  # offline from here until the next online span begins
    cycle = 0
    while True:
        for on, off in online:
            begin = (cycle * period + on) * time_scale
            if begin >= horizon_s:
                if offline_from < horizon_s:
                    spans.append([offline_from, horizon_s])
                return spans
            if begin > offline_from:
                spans.append([offline_from, begin])
            offline_from = max(offline_from, (cycle * period + off) * time_scale)
        cycle += 1


def convert(
    capacity: Mapping[Any, Mapping[str, float]],
    behave: Mapping[Any, Mapping[str, Any]] | None,
    clients: int,
    seed: int = 0,
    time_scale: float = 1.0,
    horizon_s: float = DEFAULT_HORIZON_S,
    links: bool = True,
) -> dict[str, Any]:
    """A heterogeneity trace (the JSON format of ``ring_actors/heterogeneity/__init__.py``) for
    ``clients`` devices drawn with ``seed`` from those both files describe."""
    if time_scale <= 0 or not 0 < horizon_s <= MAX_RUN_CLOCK_S:
        raise ValueError(f"time_scale must be > 0 and horizon_s in (0, {MAX_RUN_CLOCK_S:g}]")
    pool = [c for c in capacity if behave is None or _can_be_online(behave.get(c))]
    if len(pool) < clients:
        raise ValueError(f"{clients} clients asked, {len(pool)} devices described")
    picked = random.Random(seed).sample(sorted(pool, key=str), clients)
    latency = [float(capacity[c]["computation"]) for c in picked]
    if min(latency) <= 0:
        raise ValueError("computation latencies must be > 0")
    trace: dict[str, Any] = {
        "compute": {str(i): ms / min(latency) for i, ms in enumerate(latency)},
    }
    if links:
        uplink = [float(capacity[c]["communication"]) * 1000 / 8 for c in picked]  # bytes/s
        trace["bandwidth_bytes_s"] = [
            [0.0 if a == b else uplink[a] for b in range(clients)] for a in range(clients)
        ]
    if behave is not None:
        trace["availability"] = {
            str(i): offline_spans(behave[c], time_scale, horizon_s) for i, c in enumerate(picked)
        }
    return trace


def _can_be_online(behave: Mapping[str, Any] | None) -> bool:
    return bool(behave and behave.get("active") and float(behave.get("finish_time", 0)) > 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capacity", type=Path, required=True, help="client_device_capacity")
    parser.add_argument("--behave", type=Path, help="client_behave_trace (availability)")
    parser.add_argument("--clients", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--time-scale", type=float, default=1.0)
    parser.add_argument("--horizon-s", type=float, default=DEFAULT_HORIZON_S)
    parser.add_argument("--no-links", action="store_true", help="speeds and availability only")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    behave = read_pickle(args.behave) if args.behave else None
    trace = convert(
        read_pickle(args.capacity),
        behave,
        args.clients,
        args.seed,
        args.time_scale,
        args.horizon_s,
        not args.no_links,
    )
    args.out.write_text(json.dumps(trace))


if __name__ == "__main__":
    main()
