"""Write a report folder: ``report.md`` (the table, the runs behind it) and its figures."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ring_actors.report.figures import accuracy_curves, ring_timeline, slug
from ring_actors.report.runs import Run
from ring_actors.report.tables import BYTES_PER_VALUE, build_table, render_runs, render_table

REPORT = "report.md"


def write_report(
    runs: Sequence[Run],
    by: Sequence[str],
    out: Path,
    last: int = 10,
    skipped: Sequence[tuple[Path, str]] = (),
) -> list[Path]:
    """Build the table and figures for ``runs``; return every file written, report first.
    ``skipped``: the folders left out and why, listed in the report."""
    if not runs:
        raise ValueError("no runs to report on")
    table = build_table(runs, by, last)  # refuses a seed counted twice before writing
    out.mkdir(parents=True, exist_ok=True)
    curves = accuracy_curves(table, out)
    timed = accuracy_curves(table, out, over="time")
    names = _timeline_names(runs)
    timelines = [ring_timeline(run, out / name) for run, name in zip(runs, names, strict=True)]
    partial = [run for run in runs if run.partial]
    text = [
        "# Report",
        "",
        f"{len(runs)} runs; rows: {table.row_key}; columns: {', '.join(table.column_keys) or '-'}.",
        f"Local-T and Global-T: accuracy (%) of the client mean in each evaluated round, "
        f"averaged over the last {last} evaluated rounds (all if fewer), then mean ± std over "
        f"the n runs of a cell (its seeds). # Comm.: values sent per hop (at {BYTES_PER_VALUE} "
        "bytes each) and the bytes, mean over the cell's runs that counted hops. † marks a cell "
        "with a partial run.",
        "",
        render_table(table),
        "",
    ]
    if table.split_by:
        text += [
            "Rows are split where runs of one row and column differ in more than the seed: "
            f"{', '.join(table.split_by)} (shown in brackets); such runs are never averaged.",
            "",
        ]
    if skipped:
        text += ["Folders left out:", ""]
        text += [f"- `{path}`: {why}" for path, why in skipped] + [""]
    if partial:
        text += ["Partial runs:", ""]
        text += [f"- `{run.path}`: {run.partial}" for run in partial] + [""]
    text += ["## Runs", "", render_runs(runs, last), "", "## Accuracy by round", ""]
    text += [f"![{p.stem}]({p.name})" for p in curves] + ["", "## Accuracy by wall time", ""]
    text += [f"![{p.stem}]({p.name})" for p in timed] + ["", "## Ring timelines", ""]
    text += [f"![{p.stem}]({p.name})" for p in timelines] + [""]
    report = out / REPORT
    report.write_text("\n".join(text))
    return [report, *curves, *timed, *timelines]


def _timeline_names(runs: Sequence[Run]) -> list[str]:
    """``timeline-<run>.png``, numbered when two runs share a directory name."""
    names: list[str] = []
    for run in runs:
        name = f"timeline-{slug(run.name)}"
        candidate, count = name, 1
        while f"{candidate}.png" in names:
            count += 1
            candidate = f"{name}-{count}"
        names.append(f"{candidate}.png")
    return names
