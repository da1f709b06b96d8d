"""A heterogeneity trace file: per-client speeds, per-link latency and bandwidth, offline spans.

Checked as strictly as the YAML config, since JSON lets through what YAML refuses: every number
finite and a number (``true`` and ``"2"`` are not) within its bound below, every client id an
integer (as an object key, its decimal text: ``"3"``). A null in a matrix or a link entry
leaves that value as the section's.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The bounds of every value a run's heterogeneity may take, from the section or a trace file:
# far past any real device, link or availability trace (FedScale's measured ones included),
# so a value beyond one is a slip of units or digits, refused before anything starts. They
# also keep every wait the link simulator and a client compute far inside what a timer takes
# (``threading.TIMEOUT_MAX``, about 292 years).
MAX_LATENCY_S = 600.0  # a link's latency: real ones (satellite, congested mobile) are seconds
MIN_BANDWIDTH_BYTES_S = 1.0  # a link's bandwidth: 8 bit/s
MAX_LINK_DELAY_S = 86_400.0  # a hop as computed (drawn latency, bytes over bandwidth): a day
MAX_COMPUTE_FACTOR = 10_000.0  # a client's speed factor, traced, listed or drawn
MAX_RUN_CLOCK_S = 365 * 86_400.0  # an off period's end, a drawn period's mean: a year of run

PARTS = ("compute", "links", "latency_s", "bandwidth_bytes_s", "availability")
LINK_VALUES: dict[str, tuple[str, Callable[[float], bool]]] = {
    "latency_s": (
        f"a finite number in [0, {MAX_LATENCY_S:g}] (seconds) or null",
        lambda s: 0 <= s <= MAX_LATENCY_S,
    ),
    "bandwidth_bytes_s": (
        f"a finite number >= {MIN_BANDWIDTH_BYTES_S:g} (bytes/s) or null",
        lambda b: b >= MIN_BANDWIDTH_BYTES_S,
    ),
}
FACTOR = f"a finite number in [1, {MAX_COMPUTE_FACTOR:g}] (1 = full speed)"
SPAN = f"[from_s, to_s]: finite numbers with 0 <= from_s < to_s <= {MAX_RUN_CLOCK_S:g}"

Link = tuple[int, int]


def _must(ok: bool, key: str, allowed: str, value: Any = ...) -> None:
    """A ValueError naming the entry; the section that reads the file adds its key and path."""
    if not ok:
        got = "" if value is ... else f", got {value!r}"
        raise ValueError(f"{key}: must be {allowed}{got}")


@dataclass(frozen=True)
class Trace:
    compute: dict[int, float]
    links: dict[Link, tuple[float | None, float | None]]  # latency, bandwidth
    offline: dict[int, list[tuple[float, float]]]


def read_trace(path: str | Path) -> Trace:
    """Parse and check a trace file; ValueError names the entry that is wrong."""
    data = json.loads(Path(path).read_text())
    _must(isinstance(data, dict), "the file", "a JSON object", type(data).__name__)
    unknown = sorted(set(data) - set(PARTS))
    _must(not unknown, "the file", f"an object with keys among {', '.join(PARTS)}", unknown)
    links = _matrix_links(data)
    _add_link_entries(data, links)
    return Trace(_compute(data), links, _offline(data))


def _part(data: dict[str, Any], name: str, kind: type) -> Any:
    """The part ``name`` of the file, empty when absent or null."""
    value = data.get(name)
    if value is None:
        return kind()
    _must(isinstance(value, kind), name, f"a JSON {'object' if kind is dict else 'list'}", value)
    return value


def _number(
    value: Any, key: str, allowed: str, within: Callable[[float], bool] = lambda _: True
) -> float:
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    try:
        number = float(value) if is_number else math.nan
    except OverflowError:  # an integer past a float's range
        number = math.inf
    _must(math.isfinite(number) and within(number), key, allowed, value)
    return number


def _client_id(value: Any, key: str) -> int:
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    _must(ok, key, "a client id: an integer >= 0", value)
    return value


def _client_key(text: str, key: str) -> int:
    """A client id written as an object key: its decimal text, ``"3"``."""
    _must(re.fullmatch(r"0|[1-9][0-9]*", text) is not None, key, 'a client id such as "3"', text)
    return int(text)


def _compute(data: dict[str, Any]) -> dict[int, float]:
    speeds = {}
    for client, factor in _part(data, "compute", dict).items():
        key = f"compute.{client}"
        speeds[_client_key(client, key)] = _number(factor, key, FACTOR, _is_factor)
    return speeds


def _is_factor(factor: float) -> bool:
    return 1 <= factor <= MAX_COMPUTE_FACTOR


def _matrix_links(data: dict[str, Any]) -> dict[Link, tuple[float | None, float | None]]:
    """The ``latency_s`` and ``bandwidth_bytes_s`` matrices (row: sender), diagonal aside."""
    links: dict[Link, tuple[float | None, float | None]] = {}
    for name, (allowed, within) in LINK_VALUES.items():
        for a, row in enumerate(_part(data, name, list)):
            _must(isinstance(row, list), f"{name}[{a}]", "a row: a list of numbers", row)
            for b, value in enumerate(row):
                if value is None:
                    continue
                key = f"{name}[{a}][{b}]"
                if a == b:  # a client's link to itself is never used
                    _number(value, key, "a finite number or null")
                    continue
                _set(links, (a, b), name, _number(value, key, allowed, within))
    return links


def _add_link_entries(
    data: dict[str, Any], links: dict[Link, tuple[float | None, float | None]]
) -> None:
    """The ``links`` entries, over what the matrices said for the same links."""
    fields = ("from", "to", *LINK_VALUES)
    for i, entry in enumerate(_part(data, "links", list)):
        key = f"links[{i}]"
        shape = "an object with from, to, and latency_s or bandwidth_bytes_s"
        _must(isinstance(entry, dict) and {"from", "to"} <= set(entry), key, shape, entry)
        unknown = sorted(set(entry) - set(fields))
        _must(not unknown, key, f"an object with keys among {', '.join(fields)}", unknown)
        link = (_client_id(entry["from"], f"{key}.from"), _client_id(entry["to"], f"{key}.to"))
        for name, (allowed, within) in LINK_VALUES.items():
            if entry.get(name) is not None:
                _set(links, link, name, _number(entry[name], f"{key}.{name}", allowed, within))


def _set(
    links: dict[Link, tuple[float | None, float | None]], link: Link, name: str, value: float
) -> None:
    latency, bandwidth = links.get(link, (None, None))
    links[link] = (value, bandwidth) if name == "latency_s" else (latency, value)


def _offline(data: dict[str, Any]) -> dict[int, list[tuple[float, float]]]:
    offline = {}
    for client, spans in _part(data, "availability", dict).items():
        key = f"availability.{client}"
        client_id = _client_key(client, key)
        _must(isinstance(spans, list), key, f"a list of {SPAN}", spans)
        checked = []
        for i, span in enumerate(spans):
            at = f"{key}[{i}]"
            _must(isinstance(span, list) and len(span) == 2, at, SPAN, span)
            start, end = (_number(t, at, SPAN) for t in span)
            _must(0 <= start < end <= MAX_RUN_CLOCK_S, at, SPAN, span)
            checked.append((start, end))
        offline[client_id] = sorted(checked)
    return offline
