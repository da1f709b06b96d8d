"""The comparison table: methods down, (dataset, partition) cells across, as in the papers."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ring_actors.report.runs import Run
from ring_actors.report.settings import check_seeds, differing_keys, label

BYTES_PER_VALUE = 4  # the payloads' tensors are float32: parameters = bytes / 4

# What ``--by`` may name: the first key gives the rows, the others the columns.
GROUPINGS: dict[str, Callable[[Run], str]] = {
    "method": lambda run: run.method,
    "dataset": lambda run: run.dataset,
    "partition": lambda run: run.partition,
    "mode": lambda run: f"mode={run.summary.get('mode')}",
    "topology": lambda run: f"topology={run.summary.get('topology')}",
    "clients": lambda run: f"clients={run.config.get('clients', {}).get('count')}",
    "rounds": lambda run: f"rounds={run.rounds_planned}",
}
ACCURACIES = {"local_acc": "Local-T", "global_acc": "Global-T"}


@dataclass(frozen=True)
class Stat:
    """Mean and (population) standard deviation over the seeds of a cell; ``n`` runs."""

    mean: float
    std: float
    n: int


@dataclass(frozen=True)
class Cell:
    """The runs that share a row and a column, and what the table shows for them."""

    runs: tuple[Run, ...]
    accuracy: Mapping[str, Stat | None]  # keyed by ``ACCURACIES``
    bytes_per_hop: float

    @property
    def partial(self) -> tuple[Run, ...]:
        return tuple(run for run in self.runs if run.partial)


@dataclass(frozen=True)
class Table:
    row_key: str
    column_keys: tuple[str, ...]
    rows: tuple[str, ...]
    columns: tuple[tuple[str, ...], ...]
    cells: Mapping[tuple[str, tuple[str, ...]], Cell]
    split_by: tuple[str, ...] = ()  # setting keys that split a row: they differ among its runs


def round_means(run: Run, key: str) -> list[tuple[int, float]]:
    """The client mean of ``key`` in each evaluated round, in round order."""
    by_round: dict[int, list[float]] = defaultdict(list)
    for row in run.rows:
        value = getattr(row, key)
        if value is not None:
            by_round[row.round].append(value)
    return [(r, statistics.fmean(v)) for r, v in sorted(by_round.items())]


def last_mean(run: Run, key: str, last: int = 10) -> float | None:
    """Mean over the last ``last`` evaluated rounds (all if fewer) of the per-round client
    mean: the papers' way of quoting a final accuracy that does not hinge on one round."""
    means = [value for _, value in round_means(run, key)[-last:]]
    return statistics.fmean(means) if means else None


def stat(values: Sequence[float]) -> Stat | None:
    if not values:
        return None
    return Stat(statistics.fmean(values), statistics.pstdev(values), len(values))


def parse_by(text: str) -> tuple[str, ...]:
    """``method,dataset,partition`` as keys, each one checked against ``GROUPINGS``."""
    keys = tuple(k.strip() for k in text.split(",") if k.strip())
    unknown = [k for k in keys if k not in GROUPINGS]
    if not keys or unknown:
        raise ValueError(f"--by: {unknown or text!r} not in {', '.join(GROUPINGS)}")
    return keys


def build_table(runs: Sequence[Run], by: Sequence[str], last: int = 10) -> Table:
    """Group the runs (the seeds of a cell are the runs that share every key) and sum up.

    Runs of one row and column whose settings differ other than by seed are never averaged:
    the keys that differ go into the row's label, one row per setting. A seed counted twice
    in a cell is refused (ValueError)."""
    row_key, column_keys = by[0], tuple(by[1:])
    grouped: dict[tuple[str, tuple[str, ...]], list[Run]] = defaultdict(list)
    for run in runs:
        column = tuple(GROUPINGS[k](run) for k in column_keys)
        grouped[(GROUPINGS[row_key](run), column)].append(run)
    split_by = differing_keys(list(grouped.values()))
    groups: dict[tuple[str, tuple[str, ...]], list[Run]] = defaultdict(list)
    for (row, column), members in grouped.items():
        for run in members:
            groups[(f"{row} [{label(run, split_by)}]" if split_by else row, column)].append(run)
    check_seeds(groups)
    cells = {key: _cell(members, last) for key, members in groups.items()}
    return Table(
        row_key=row_key,
        column_keys=column_keys,
        rows=tuple(sorted({r for r, _ in groups})),
        columns=tuple(sorted({c for _, c in groups})),
        cells=cells,
        split_by=split_by,
    )


def _cell(runs: list[Run], last: int) -> Cell:
    runs = sorted(runs, key=lambda r: (r.seed, r.name))
    accuracy = {}
    for key in ACCURACIES:
        values = [last_mean(run, key, last) for run in runs]
        accuracy[key] = stat([v for v in values if v is not None])
    # A run stopped before its clients said goodbye has no hop count: leave it out.
    counted = [float(r.summary["bytes_per_hop"]) for r in runs if r.summary.get("hops")]
    bytes_per_hop = statistics.fmean(counted) if counted else 0.0
    return Cell(runs=tuple(runs), accuracy=accuracy, bytes_per_hop=bytes_per_hop)


def column_label(column: tuple[str, ...]) -> str:
    return " ".join(column) if column else "all runs"


def format_stat(value: Stat | None, partial: bool) -> str:
    """Percent with two decimals, ± std over the ``n`` seeds when there are several, and
    ``n`` always; † when partial."""
    mark = " †" if partial else ""
    if value is None:
        return "–" + mark
    text = f"{100 * value.mean:.2f}"
    if value.n > 1:
        text += f" ± {100 * value.std:.2f}"
    return f"{text} (n={value.n}){mark}"


def format_comm(bytes_per_hop: float) -> str:
    """Parameters (at ``BYTES_PER_VALUE`` bytes each) in millions, as the papers print them,
    and the bytes, per hop."""
    values = bytes_per_hop / BYTES_PER_VALUE
    return f"{values / 1e6:.2f} M ({bytes_per_hop / 1e6:.2f} MB)"


def render_table(table: Table) -> str:
    """The table as Markdown: per column cell, Local-T, Global-T and # Comm."""
    header = [table.row_key]
    for column in table.columns:
        label = column_label(column)
        header += [f"{label} {name}" for name in ACCURACIES.values()] + [f"{label} # Comm."]
    lines = [_line(header), _line(["---"] * len(header))]
    for row in table.rows:
        values = [row]
        for column in table.columns:
            cell = table.cells.get((row, column))
            if cell is None:
                values += ["–"] * (len(ACCURACIES) + 1)
                continue
            partial = bool(cell.partial)
            values += [format_stat(cell.accuracy[k], partial) for k in ACCURACIES]
            values.append(format_comm(cell.bytes_per_hop))
        lines.append(_line(values))
    return "\n".join(lines)


def render_runs(runs: Sequence[Run], last: int = 10) -> str:
    """One line per run: where each number of the table comes from."""
    header = [
        "run", "method", "dataset", "partition", "seed", "rounds", "Local-T", "Global-T",
        "bytes/hop", "hops", "crashes", "hangs", "bypasses", "joins", "partial",
    ]  # fmt: skip
    lines = [_line(header), _line(["---"] * len(header))]
    for run in runs:
        events = run.summary.get("events", {})
        accuracy = [last_mean(run, k, last) for k in ACCURACIES]
        lines.append(
            _line(
                [
                    f"`{run.path}`",
                    run.method,
                    run.dataset,
                    run.partition,
                    str(run.seed),
                    f"{run.rounds_completed}/{run.rounds_planned}",
                    *("–" if a is None else f"{100 * a:.2f}" for a in accuracy),
                    f"{float(run.summary.get('bytes_per_hop', 0.0)):.0f}",
                    str(run.summary.get("hops", 0)),
                    *(str(events.get(k, 0)) for k in ("crashes", "hangs", "bypasses", "joins")),
                    run.partial or "",
                ]
            )
        )
    return "\n".join(lines)


def _line(values: Sequence[str]) -> str:
    return "| " + " | ".join(v.replace("|", "\\|") for v in values) + " |"
