"""The report's figures, drawn with plain matplotlib on the Agg backend (no display needed)."""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
from matplotlib import pyplot as plt  # noqa: E402  (the backend must be chosen first)
from matplotlib.figure import Figure  # noqa: E402

from ring_actors.report.runs import Run  # noqa: E402
from ring_actors.report.tables import ACCURACIES, Table, column_label, round_means  # noqa: E402

# Membership events drawn as a marker on the client's line: marker, colour, and how many
# rounds the client had finished, from the event's round (the last finished round for a
# crash, hang or rejoin; the first round to train for a join or a failing round).
EVENT_MARKERS = {
    "crash": ("X", "tab:red", 1),
    "hang": ("P", "tab:orange", 1),
    "rejoin": ("D", "tab:olive", 1),
    "client_error": ("s", "tab:red", 0),
    "join": ("^", "tab:green", 0),
}
# Delays and offline periods (see ``heterogeneity``), drawn as a bar on the client's
# line from the event for its ``duration_s``: colour, bar width, and the rounds the client
# had finished, from the event's round (as for the markers).
EVENT_SPANS = {
    "offline": ("tab:red", 6, 1),
    "compute_delay": ("tab:gray", 3, 0),
    "link_delay": ("tab:cyan", 2, 1),
}
# Changes of the whole ring, drawn as a vertical line: colour and line style.
EVENT_LINES = {
    "bypass": ("tab:purple", ":"),
    "run_stopped": ("black", "--"),
    "coordinator_restored": ("tab:gray", "--"),
}


def seed_band(
    runs: Sequence[Run], key: str, over: str = "round"
) -> list[tuple[float, float, float]]:
    """Per round: where it sits (the round, or with ``over="time"`` the seconds of the run
    its evaluations came at, mean over seeds), the mean over seeds of the client-mean
    ``key``, and its std over seeds."""
    by_round: dict[int, list[float]] = defaultdict(list)
    at_s: dict[int, list[float]] = defaultdict(list)
    for run in runs:
        times = round_times(run)
        for round_, value in round_means(run, key):
            by_round[round_].append(value)
            at_s[round_].append(times[round_])
    return [
        (
            statistics.fmean(at_s[r]) if over == "time" else r,
            statistics.fmean(v),
            statistics.pstdev(v),
        )
        for r, v in sorted(by_round.items())
    ]


def round_times(run: Run) -> dict[int, float]:
    """Each evaluated round's mean report time, seconds of the run."""
    by_round: dict[int, list[float]] = defaultdict(list)
    for row in run.rows:
        by_round[row.round].append(row.time_s)
    return {r: statistics.fmean(t) for r, t in by_round.items()}


X_AXES = {"round": "round (from 0)", "time": "wall time of the run (s)"}


LINE_STYLES = ("-", "--", ":", "-.")
MIN_SPAN = 10.0  # accuracy points the y-axis shows at least: noise must not look like a climb


def _at_least_span(axis, span: float) -> None:
    """Widen the y-axis to ``span`` around its data, within 0..100."""
    low, high = axis.get_ylim()
    if high - low >= span:
        return
    middle = (low + high) / 2
    low = min(max(0.0, middle - span / 2), 100.0 - span)
    axis.set_ylim(low, low + span)


def accuracy_curves(table: Table, directory: Path, over: str = "round") -> list[Path]:
    """One figure per column cell: Local-T and Global-T by round (``over="time"``: by the
    run's wall seconds, which compares a sync run with an async one by what each took), a
    line per table row (mean over its seeds) with a band of ± one std over seeds."""
    paths = []
    for column in table.columns:
        figure, axes = plt.subplots(1, len(ACCURACIES), figsize=(11, 4), sharex=True)
        for axis, (key, title) in zip(axes, ACCURACIES.items(), strict=True):
            for number, row in enumerate(table.rows):
                cell = table.cells.get((row, column))
                band = seed_band(cell.runs, key, over) if cell else []
                if not band:
                    continue
                rounds = [r for r, _, _ in band]  # from 0, as metrics.parquet and MLflow
                (line,) = axis.plot(
                    rounds,
                    [100 * m for _, m, _ in band],
                    marker="o",
                    markersize=3,
                    label=row,
                    color=f"C{number % 10}",
                    linestyle=LINE_STYLES[number // 10 % len(LINE_STYLES)],  # past ten colours
                )
                axis.fill_between(
                    rounds,
                    [100 * (m - s) for _, m, s in band],
                    [100 * (m + s) for _, m, s in band],
                    color=line.get_color(),
                    alpha=0.2,
                )
            axis.set(title=title, xlabel=X_AXES[over], ylabel="accuracy (%)")
            axis.xaxis.get_major_locator().set_params(integer=over == "round")
            _at_least_span(axis, MIN_SPAN)
            axis.grid(alpha=0.3)
        figure.suptitle(column_label(column))
        figure.tight_layout()
        if axes[0].get_legend_handles_labels()[0]:  # beside the plots, never over a curve
            figure.subplots_adjust(right=0.85)
            axes[-1].legend(title=table.row_key, loc="upper left", bbox_to_anchor=(1.02, 1.0))
        suffix = "" if over == "round" else f"-by-{over}"
        path = directory / f"curves-{slug(column_label(column))}{suffix}.png"
        figure.savefig(path, dpi=100, bbox_inches="tight")  # a long row label widens the file
        plt.close(figure)
        paths.append(path)
    return paths


def ring_timeline(run: Run, path: Path) -> Path:
    """Draw ``timeline_figure`` to a PNG at ``path``."""
    figure = timeline_figure(run)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def timeline_figure(run: Run) -> Figure:
    """Each client's evaluated rounds over the run's wall clock, with the membership events
    (crashes, hangs, bypasses, joins) marked where and when they happened."""
    figure, axis = plt.subplots(figsize=(10, 4.5))
    by_client: dict[int, list[tuple[float, int]]] = defaultdict(list)
    for row in run.rows:
        by_client[row.client].append((row.time_s, row.round))
    for client, points in sorted(by_client.items()):
        points.sort()
        axis.plot(
            [t for t, _ in points],
            [r + 1 for _, r in points],
            marker="o",
            markersize=3,
            linewidth=1,
            drawstyle="steps-post",  # a client stays at its last finished round until the next
            label=f"client {client}",
        )
    drawn: set[str] = set()
    for event in run.events:
        label = None if event.kind in drawn else event.kind
        if event.kind in EVENT_SPANS and event.duration_s > 0:
            colour, width, finished = EVENT_SPANS[event.kind]
            y = max(event.round, 0) + finished
            axis.hlines(
                y, event.time_s, event.time_s + event.duration_s, colors=colour,
                linewidth=width, alpha=0.6, label=label, zorder=1,
            )  # fmt: skip
        elif event.kind in EVENT_LINES:
            colour, style = EVENT_LINES[event.kind]
            axis.axvline(event.time_s, color=colour, linestyle=style, label=label)
        elif event.kind in EVENT_MARKERS:
            marker, colour, finished = EVENT_MARKERS[event.kind]
            y = max(event.round, 0) + finished
            axis.scatter(
                [event.time_s], [y], marker=marker, s=90, color=colour,
                edgecolors="black", zorder=3, label=label,
            )  # fmt: skip
            axis.annotate(
                str(event.client), (event.time_s, y), (5, 5),
                textcoords="offset points", fontsize=8,
            )  # fmt: skip
        else:
            continue
        drawn.add(event.kind)
    axis.set(
        title=f"{run.name}: {run.method} on {run.dataset} ({run.partition})",
        xlabel="wall time since the rounds began (s)",
        ylabel="rounds finished",
    )
    axis.set_xlim(left=0)
    axis.yaxis.get_major_locator().set_params(integer=True)
    axis.grid(alpha=0.3)
    if axis.get_legend_handles_labels()[0]:  # a run stopped before any evaluation has none
        axis.legend(loc="upper left", fontsize=8, ncol=2)
    figure.tight_layout()
    return figure


def slug(text: str) -> str:
    """A label as a file name: ``fashion-mnist shard s=2`` -> ``fashion-mnist_shard_s2``."""
    return re.sub(r"[^A-Za-z0-9.-]+", "_", text.replace("=", "")).strip("_") or "all"
