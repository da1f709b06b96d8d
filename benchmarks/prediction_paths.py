"""Every prediction path, diagnostic and shared-state spread of a ``benchmarks.fidelity`` run.

    python -m benchmarks.prediction_paths benchmarks/results/drdfl_reach.json

One row per method spec: each path's Local-T and Global-T (client mean over the last
``--last`` evaluated rounds, then mean ± std over seeds), each diagnostic's client mean and
each shared group's spread across clients at the final evaluation (mean ± std over seeds), and
the partition digests the seeds ran on (equal digests across rows: the same splits).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def _mean_std(values: list[float], scale: float = 1.0, digits: int = 1) -> str:
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{scale * statistics.fmean(values):.{digits}f} ± {scale * std:.{digits}f}"


def rows(runs: list[dict], last: int) -> dict[str, dict[str, list[float]]]:
    """Per spec, per column, one value per seed."""
    out: dict[str, dict[str, list[float]]] = {}
    for run in runs:
        cols = out.setdefault(run["spec"], {})
        tail, final = run["rounds"][-last:], run["rounds"][-1]
        for split in ("local", "global"):
            for path in tail[0].get(f"{split}_paths", {}):
                value = statistics.fmean(statistics.fmean(r[f"{split}_paths"][path]) for r in tail)
                cols.setdefault(f"{split} {path}", []).append(value)
        for key, values in final.get("diagnostics", {}).items():
            cols.setdefault(key, []).append(statistics.fmean(values))
        for group, value in final.get("shared_spread", {}).items():
            cols.setdefault(f"spread {group}", []).append(value)
        digest = run.get("partition", {}).get("sha256", "")
        cols.setdefault("partition", []).append(digest[:8])  # type: ignore[arg-type]
    return out


def table(runs: list[dict], last: int) -> str:
    by_spec = rows(runs, last)
    columns = list(dict.fromkeys(c for cols in by_spec.values() for c in cols))
    lines = ["| method | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for spec, cols in by_spec.items():
        cells = []
        for column in columns:
            values = cols.get(column)
            if not values:
                cells.append("")
            elif column == "partition":
                cells.append(" ".join(str(v) for v in values))
            elif column.startswith(("local ", "global ")):
                cells.append(_mean_std(values, 100.0))
            elif column.startswith("spread"):
                cells.append(_mean_std(values, 1.0, 3))
            else:
                cells.append(_mean_std(values, 1.0, 1))
        lines.append(f"| {spec} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="a benchmarks.fidelity JSON")
    parser.add_argument("--last", type=int, default=None, help="default: the run's own --last")
    args = parser.parse_args(argv)
    record = json.loads(args.results.read_text())
    print(table(record["runs"], args.last or record["setting"]["last"]))


if __name__ == "__main__":
    main()
