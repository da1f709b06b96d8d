"""The comparison table: the numbers are those of the runs' metrics, grouped as asked."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
import yaml

from ring_actors.report.runs import load_run
from ring_actors.report.tables import (
    Stat,
    build_table,
    format_stat,
    last_mean,
    parse_by,
    render_table,
    round_means,
)
from tests.helpers.run_folders import make_run

DIR = {"kind": "dirichlet", "beta": 0.1}


def expected_last(rows, key, last=10):
    """Per-round client means, then the mean of the last ``last`` rounds: numpy's way."""
    by_round = defaultdict(list)
    for row in rows:
        by_round[row["round"]].append(row[key])
    means = [np.mean(by_round[r]) for r in sorted(by_round)]
    return float(np.mean(means[-last:]))


@pytest.fixture
def sweep(tmp_path):
    """2 methods x 2 seeds on two partitions; one partial run; returns the metric rows."""
    rows = {}
    for method in ("dfedavg", "drdfl"):
        for seed in (0, 1):
            rows[method, "shard", seed] = make_run(
                tmp_path / f"{method}-shard-{seed}", method, seed, bytes_per_hop=1e6 * (seed + 1)
            )
            rows[method, "dir", seed] = make_run(
                tmp_path / f"{method}-dir-{seed}", method, seed, partition=DIR, rounds=6
            )
    rows["drdfl", "stopped", 2] = make_run(
        tmp_path / "drdfl-dir-2", "drdfl", 2, partition=DIR, rounds=6, completed=3, stopped="x"
    )
    runs = [load_run(p) for p in sorted(tmp_path.iterdir())]
    return runs, rows


def test_last_mean_averages_the_last_ten_rounds_of_the_client_mean(tmp_path):
    rows = make_run(tmp_path / "a", rounds=14)
    run = load_run(tmp_path / "a")
    assert [r for r, _ in round_means(run, "local_acc")] == list(range(14))
    for key in ("local_acc", "global_acc"):
        assert last_mean(run, key) == pytest.approx(expected_last(rows, key))
        assert last_mean(run, key, 3) == pytest.approx(expected_last(rows, key, 3))
    assert last_mean(run, "local_acc") != pytest.approx(expected_last(rows, "local_acc", 14))


def test_rows_are_methods_and_columns_dataset_partition_cells(sweep):
    runs, _ = sweep
    table = build_table(runs, parse_by("method,dataset,partition"))
    assert table.rows == ("dfedavg", "drdfl")
    assert table.columns == (("fashion-mnist", "dir β=0.1"), ("fashion-mnist", "shard s=2"))
    assert len(table.cells[("drdfl", ("fashion-mnist", "dir β=0.1"))].runs) == 3


def test_a_cell_is_mean_and_std_over_seeds_of_the_runs_numbers(sweep):
    runs, rows = sweep
    table = build_table(runs, ["method", "dataset", "partition"])
    for method in ("dfedavg", "drdfl"):
        cell = table.cells[(method, ("fashion-mnist", "shard s=2"))]
        for key in ("local_acc", "global_acc"):
            values = [expected_last(rows[method, "shard", s], key) for s in (0, 1)]
            stat = cell.accuracy[key]
            assert stat.n == 2
            assert stat.mean == pytest.approx(np.mean(values))
            assert stat.std == pytest.approx(np.std(values))
        assert cell.bytes_per_hop == pytest.approx(1.5e6)  # the seeds sent 1 and 2 MB per hop


def test_the_markdown_table_shows_the_cells_and_marks_partial_ones(sweep):
    runs, rows = sweep
    table = build_table(runs, ["method", "dataset", "partition"])
    text = render_table(table).splitlines()
    assert text[0].startswith("| method | fashion-mnist dir β=0.1 Local-T |")
    assert text[0].count("# Comm.") == 2
    dfedavg, drdfl = text[2], text[3]
    assert dfedavg.startswith("| dfedavg |") and drdfl.startswith("| drdfl |")
    values = [expected_last(rows["dfedavg", "shard", s], "local_acc") for s in (0, 1)]
    expected = f"{100 * np.mean(values):.2f} ± {100 * np.std(values):.2f} (n=2)"
    assert f"| {expected} |" in dfedavg
    assert "| 0.38 M (1.50 MB) |" in dfedavg  # 1.5 MB per hop of float32 values
    # The stopped run is in drdfl's Dirichlet cell only: its two accuracies carry the mark.
    assert drdfl.count("†") == 2 and "†" not in dfedavg


def test_a_stopped_run_without_hops_does_not_lower_the_comm_column(sweep):
    runs, _ = sweep
    cell = build_table(runs, ["method", "partition"]).cells[("drdfl", ("dir β=0.1",))]
    assert [r.summary["hops"] for r in cell.runs].count(0) == 1
    assert cell.bytes_per_hop == pytest.approx(400_000.0)


def test_by_a_single_key_gives_one_column_and_empty_cells_show_a_dash(sweep):
    runs, _ = sweep
    table = build_table(runs, ["method"])
    assert table.columns == ((),) and "all runs Local-T" in render_table(table)
    only_dir = [r for r in runs if r.method == "drdfl" or r.partition == "shard s=2"]
    cells = render_table(build_table(only_dir, ["method", "partition"])).splitlines()
    assert cells[2].startswith("| dfedavg | – | – | – |")


def test_by_rejects_unknown_keys():
    assert parse_by("clients, method") == ("clients", "method")
    for bad in ("method,seedz", ""):
        with pytest.raises(ValueError, match="--by"):
            parse_by(bad)


def test_a_single_run_has_no_spread_to_show_and_says_n():
    assert format_stat(Stat(0.91234, 0.0, 1), partial=False) == "91.23 (n=1)"
    assert format_stat(Stat(0.5, 0.01, 3), partial=True) == "50.00 ± 1.00 (n=3) †"
    assert format_stat(None, partial=False) == "–"


def test_runs_of_two_settings_are_two_rows_never_one_average(tmp_path):
    make_run(tmp_path / "small-0", "drdfl", 0, clients=2, rounds=2)
    make_run(tmp_path / "big-0", "drdfl", 0, clients=8, rounds=10)
    make_run(tmp_path / "big-1", "drdfl", 1, clients=8, rounds=10)
    runs = [load_run(p) for p in sorted(tmp_path.iterdir())]
    table = build_table(runs, ["method", "dataset"])
    assert table.split_by == ("clients.count", "experiment.rounds")
    assert table.rows == (
        "drdfl [clients.count=2, experiment.rounds=2]",
        "drdfl [clients.count=8, experiment.rounds=10]",
    )
    column = ("fashion-mnist",)
    assert table.cells[(table.rows[0], column)].accuracy["local_acc"].n == 1
    assert table.cells[(table.rows[1], column)].accuracy["local_acc"].n == 2
    text = render_table(table)
    assert "(n=1)" in text and "(n=2)" in text


def test_a_seed_counted_twice_is_refused_naming_both_folders(tmp_path):
    make_run(tmp_path / "a", "drdfl", 0)
    make_run(tmp_path / "copy-of-a", "drdfl", 0)
    runs = [load_run(p) for p in sorted(tmp_path.iterdir())]
    with pytest.raises(ValueError, match="seed 0 of one setting is counted twice") as err:
        build_table(runs, ["method"])
    assert str(tmp_path / "a") in str(err.value) and "copy-of-a" in str(err.value)


def test_where_a_run_ran_and_its_name_do_not_split_a_row(tmp_path):
    for seed, cpus in ((0, 0.5), (1, 1.0)):
        make_run(tmp_path / f"r{seed}", "drdfl", seed)
        path = tmp_path / f"r{seed}" / "config.yaml"
        config = yaml.safe_load(path.read_text())
        config["experiment"]["name"] = f"run{seed}"
        config["clients"]["num_cpus"] = cpus
        config["ray"] = {"address": f"host{seed}"}
        path.write_text(yaml.safe_dump(config))
    runs = [load_run(p) for p in sorted(tmp_path.iterdir())]
    table = build_table(runs, ["method"])
    assert table.rows == ("drdfl",) and table.split_by == ()
