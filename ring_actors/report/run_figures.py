"""One run's own figures, drawn into its folder at the end of the run (and so into its MLflow
run): the accuracy curves and the ring timeline that ``jobs.report`` draws for many."""

from __future__ import annotations

from pathlib import Path

from ring_actors.report.figures import accuracy_curves, ring_timeline
from ring_actors.report.runs import load_run
from ring_actors.report.tables import build_table
from ring_actors.storage.run_folder import RunFolder

CURVES, TIMELINE = RunFolder.CURVES, RunFolder.TIMELINE


def write_run_figures(run_dir: Path) -> list[Path]:
    """``curves.png`` (Local-T and Global-T by round) and ``timeline.png`` in ``run_dir``."""
    run = load_run(run_dir)
    table = build_table([run], ("method",))
    (drawn,) = accuracy_curves(table, run_dir)  # one run: one column, one figure
    return [drawn.replace(run_dir / CURVES), ring_timeline(run, run_dir / TIMELINE)]
