"""``python -m jobs.report``: on real runs of ``jobs.train`` and on written run directories."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from matplotlib import image
from mlflow.tracking import MlflowClient

from jobs.report import main as report
from jobs.train import main as train
from tests.conftest import DATA_ROOT, fresh_store, needs_data
from tests.helpers.run_folders import make_run

REPO = Path(__file__).resolve().parents[2]
RING8 = REPO / "jobs" / "configs" / "ring8-drdfl.yaml"
EXPERIMENT = "report-test"


def table_rows(report_md: Path) -> dict[str, list[str]]:
    """The first table of report.md as {row name: cells}; the header under ``"header"``."""
    lines = report_md.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| "))
    rows = {}
    for line in lines[start:]:
        if not line.startswith("| "):
            break
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        rows["header" if not rows else cells[0]] = cells[1:]
    rows.pop("---", None)
    return rows


def parse_cell(text: str) -> tuple[float, float, int]:
    """``"74.78 ± 6.64 (n=2) †"`` as (74.78, 6.64, 2); ``"74.78 (n=1)"`` as (74.78, 0, 1)."""
    values, n = text.split(" (n=")
    mean, _, std = values.partition(" ± ")
    return float(mean), float(std or 0), int(n.split(")")[0])


def last_mean(run_dir: Path, key: str, last: int = 10) -> float:
    """From metrics.parquet directly: the client mean per round, over the last rounds."""
    by_round = defaultdict(list)
    for row in pq.read_table(run_dir / "metrics.parquet").to_pylist():
        by_round[row["round"]].append(row[key])
    return float(np.mean([np.mean(by_round[r]) for r in sorted(by_round)][-last:]))


def assert_png(path: Path) -> None:
    pixels = image.imread(path)
    assert pixels.ndim == 3 and pixels.shape[0] > 200 and pixels.std() > 0


# ---- fast: written run directories -------------------------------------------------------


def test_the_command_reports_a_folder_of_runs(tmp_path, capsys):
    for method in ("dfedavg", "drdfl"):
        for seed in (0, 1):
            make_run(tmp_path / "runs" / f"{method}-{seed}", method, seed, rounds=4)
    make_run(tmp_path / "runs" / "cut", "drdfl", 2, rounds=4, completed=2)
    out = tmp_path / "report"
    assert report([str(tmp_path / "runs"), "--out", str(out), "--by", "method,partition"]) == 0
    assert "5 run(s)" in capsys.readouterr().out
    rows = table_rows(out / "report.md")
    assert rows["header"] == ["shard s=2 Local-T", "shard s=2 Global-T", "shard s=2 # Comm."]
    assert set(rows) == {"header", "dfedavg", "drdfl"}
    assert "†" in rows["drdfl"][0] and "(n=3)" in rows["drdfl"][0]
    assert "†" not in rows["dfedavg"][0]
    assert len(list(out.glob("*.png"))) == 7  # curves by round and by time, five timelines


def test_folders_that_are_not_runs_are_listed_with_why(tmp_path, capsys):
    make_run(tmp_path / "runs" / "done", "drdfl", 0, rounds=3)
    (tmp_path / "runs" / "never-started").mkdir()
    (tmp_path / "runs" / "never-started" / "config.yaml").write_text("experiment: {}\n")
    (tmp_path / "runs" / "notes").mkdir()
    out = tmp_path / "report"
    assert report([str(tmp_path / "runs"), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "never-started: config.yaml but no summary.json" in err
    assert "notes: no summary.json: not a run" in err
    text = (out / "report.md").read_text()
    assert "never-started" in text and "notes" in text and "clients" not in text


def test_a_duplicated_seed_is_refused_with_exit_2(tmp_path, capsys):
    make_run(tmp_path / "runs" / "a", "drdfl", 0, rounds=3)
    make_run(tmp_path / "runs" / "b", "drdfl", 0, rounds=3)
    assert report([str(tmp_path / "runs"), "--out", str(tmp_path / "r")]) == 2
    assert "counted twice" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_usage_errors_exit_2_with_the_reason(tmp_path, capsys):
    make_run(tmp_path / "a")
    assert report([str(tmp_path / "a"), "--by", "method,colour"]) == 2
    assert "colour" in capsys.readouterr().err
    assert report([str(tmp_path / "empty-dir-none")]) == 2
    (tmp_path / "empty").mkdir()
    assert report([str(tmp_path / "empty"), "--out", str(tmp_path / "r")]) == 2
    assert "no run directories" in capsys.readouterr().err
    assert report([str(tmp_path / "a"), "--experiment", "x"]) == 2
    assert "--mlflow-uri" in capsys.readouterr().err


@pytest.mark.slow
def test_a_report_imports_neither_ray_nor_torch(tmp_path):
    make_run(tmp_path / "runs" / "a", rounds=3)
    code = (
        "import sys\n"
        "from jobs.report import main\n"
        f"assert main([{str(tmp_path / 'runs')!r}, '--out', {str(tmp_path / 'out')!r}]) == 0\n"
        "print('loaded:' + ','.join(m for m in ('ray', 'torch') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip().splitlines()[-1] == "loaded:"
    assert (tmp_path / "out" / "report.md").is_file()


# ---- slow: real runs of jobs.train ---------------------------------------------------------


@pytest.fixture(scope="module")
def real_runs(ray_local, tmp_path_factory):
    """2 methods x 2 seeds (3 clients, 2 rounds) and one run stopped by a failing client,
    all logged to one MLflow experiment whose artefacts stay in the temporary folder. The
    report draws its own figures: the runs draw none (2.3 core-s each)."""
    root = tmp_path_factory.mktemp("report")
    uri = fresh_store(root / "mlflow.db")
    for name in (EXPERIMENT, "reports"):
        MlflowClient(uri).create_experiment(name, artifact_location=str(root / "artifacts" / name))
    common = [
        "--no-progress",
        "--config",
        str(RING8),  # the full Fashion-MNIST, shard splits of 2 classes, sync, no faults
        f"data.root={DATA_ROOT}",
        "data.max_train_per_client=200",
        "clients.count=3",
        "clients.num_cpus=0.5",
        "experiment.rounds=2",
        f"experiment.name={EXPERIMENT}",
        "eval.every=1",
        "eval.global_max_samples=300",
        "eval.local_max_samples=200",
        f"tracking.uri={uri}",
        "tracking.figures=false",
    ]
    for method in ("dfedavg", "fedavg"):
        for seed in (0, 1):
            out = root / "runs" / f"{method}-s{seed}"
            extra = [f"algorithm.name={method}", f"experiment.seed={seed}"]
            assert train(["--output-dir", str(out), *common, *extra]) == 0
    stopped = [
        "algorithm.name=dfedavg",
        "experiment.seed=2",
        "schedule.on_client_error=stop",
        "faults=[{at_round: 1, error: [0]}]",
    ]
    assert train(["--output-dir", str(root / "runs" / "stopped"), *common, *stopped]) == 1
    return root, uri


@needs_data
@pytest.mark.slow
def test_the_table_holds_the_numbers_of_the_real_runs(real_runs):
    root, _ = real_runs
    out = root / "report"
    assert report([str(root / "runs"), "--out", str(out)]) == 0
    rows = table_rows(out / "report.md")
    assert rows["header"] == [
        "fashion-mnist shard s=2 Local-T",
        "fashion-mnist shard s=2 Global-T",
        "fashion-mnist shard s=2 # Comm.",
    ]
    # The stopped run injected a fault and stops on errors: another setting, its own row.
    stopped = next(k for k in rows if "schedule.on_client_error=stop" in k)
    dfedavg = next(k for k in rows if k.startswith("dfedavg [") and k != stopped)
    fedavg = next(k for k in rows if k.startswith("fedavg ["))
    assert set(rows) == {"header", dfedavg, fedavg, stopped} and "faults=" in stopped
    cells = {fedavg: ["fedavg-s0", "fedavg-s1"], dfedavg: ["dfedavg-s0", "dfedavg-s1"]}
    cells[stopped] = ["stopped"]
    for method, names in cells.items():
        dirs = [root / "runs" / name for name in names]
        for column, key in enumerate(("local_acc", "global_acc")):
            values = [100 * last_mean(d, key) for d in dirs]
            mean, std, n = parse_cell(rows[method][column])
            assert n == len(dirs)
            assert mean == pytest.approx(np.mean(values), abs=0.0051)  # printed to 2 decimals
            assert std == pytest.approx(np.std(values), abs=0.0051)
        summaries = [json.loads((d / "summary.json").read_text()) for d in dirs]
        sent = [s["bytes_per_hop"] for s in summaries if s["hops"]] or [0.0]  # none counted
        assert rows[method][2] == f"{np.mean(sent) / 4e6:.2f} M ({np.mean(sent) / 1e6:.2f} MB)"
        # Every client evaluated every round: the summary's own last-10 mean agrees.
        for run_dir, summary in zip(dirs, summaries, strict=True):
            if not summary["stopped"]:
                assert last_mean(run_dir, "local_acc") == pytest.approx(summary["local_acc_last10"])
    assert rows[stopped][0].endswith("†")
    assert not rows[dfedavg][0].endswith("†") and not rows[fedavg][0].endswith("†")
    text = (out / "report.md").read_text()
    assert f"- `{root / 'runs' / 'stopped'}`: stopped: client 0 failed in round 1" in text
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert len(pngs) == 7 and "curves-fashion-mnist_shard_s2.png" in pngs
    assert "curves-fashion-mnist_shard_s2-by-time.png" in pngs
    for name in pngs:
        assert_png(out / name)


@needs_data
@pytest.mark.slow
def test_an_mlflow_experiment_gives_the_same_table_and_gets_the_report(real_runs):
    root, uri = real_runs
    from_dirs, from_mlflow = root / "from-dirs", root / "from-mlflow"
    assert report([str(root / "runs"), "--out", str(from_dirs)]) == 0
    args = ["--mlflow-uri", uri, "--experiment", EXPERIMENT, "--out", str(from_mlflow)]
    assert report(args) == 0
    assert table_rows(from_mlflow / "report.md") == table_rows(from_dirs / "report.md")
    client = MlflowClient(uri)
    reports = client.search_runs([client.get_experiment_by_name("reports").experiment_id])
    assert len(reports) == 1
    logged = {a.path for a in client.list_artifacts(reports[0].info.run_id)}
    assert "report.md" in logged and len(logged) == 8  # the report and its seven figures
