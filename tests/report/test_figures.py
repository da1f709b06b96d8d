"""Figures: accuracy curves with a seed band, and the ring timeline with its events."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
from matplotlib import image

from ring_actors.report.figures import accuracy_curves, ring_timeline, seed_band, timeline_figure
from ring_actors.report.runs import load_run
from ring_actors.report.tables import build_table
from tests.helpers.run_folders import event, make_run

PNG = b"\x89PNG\r\n\x1a\n"


def assert_png(path):
    assert path.read_bytes()[:8] == PNG
    pixels = image.imread(path)
    assert pixels.ndim == 3 and pixels.shape[0] > 200 and pixels.shape[1] > 400
    assert pixels.std() > 0  # something is drawn


def test_the_band_is_the_mean_and_std_over_seeds_of_each_rounds_client_mean(tmp_path):
    rows = [make_run(tmp_path / f"s{seed}", seed=seed, rounds=4) for seed in (0, 1, 2)]
    runs = [load_run(tmp_path / f"s{seed}") for seed in (0, 1, 2)]
    band = seed_band(runs, "global_acc")
    assert [r for r, _, _ in band] == [0, 1, 2, 3]
    for round_, mean, std in band:
        per_seed = [np.mean([r["global_acc"] for r in rs if r["round"] == round_]) for rs in rows]
        assert (mean, std) == (pytest.approx(np.mean(per_seed)), pytest.approx(np.std(per_seed)))


def test_by_wall_time_the_band_sits_at_each_rounds_mean_report_time_over_seeds(tmp_path):
    rows = [make_run(tmp_path / f"s{seed}", seed=seed, rounds=3) for seed in (0, 1)]
    runs = [load_run(tmp_path / f"s{seed}") for seed in (0, 1)]
    timed = seed_band(runs, "global_acc", over="time")
    by_round = seed_band(runs, "global_acc")
    for round_, (at_s, mean, std) in enumerate(timed):
        per_seed = [np.mean([r["time_s"] for r in rs if r["round"] == round_]) for rs in rows]
        assert at_s == pytest.approx(np.mean(per_seed))
        assert (mean, std) == by_round[round_][1:]
    out = tmp_path / "out"
    out.mkdir()
    (path,) = accuracy_curves(build_table(runs, ["method"]), out, over="time")
    assert path.name.endswith("-by-time.png")
    assert_png(path)


def test_one_curve_figure_per_column_cell(tmp_path):
    for method in ("dfedavg", "drdfl"):
        for seed in (0, 1):
            make_run(tmp_path / "runs" / f"{method}-{seed}", method, seed, rounds=5)
        make_run(tmp_path / "runs" / f"{method}-iid", method, partition={"kind": "iid"})
    runs = [load_run(p) for p in sorted((tmp_path / "runs").iterdir())]
    out = tmp_path / "out"
    out.mkdir()
    paths = accuracy_curves(build_table(runs, ["method", "dataset", "partition"]), out)
    assert [p.name for p in paths] == [
        "curves-fashion-mnist_iid.png",
        "curves-fashion-mnist_shard_s2.png",
    ]
    for path in paths:
        assert_png(path)


def test_a_long_row_label_is_kept_whole_in_the_saved_figure(tmp_path):
    widths = {}
    for method in ("fedavg", "pfedgm:lr=0.03,nu_lr=0.03,phase2_lr=0.15,lbfgs_lr=0.15"):
        make_run(tmp_path / "runs" / method, method)
        run = load_run(tmp_path / "runs" / method)
        out = tmp_path / f"out-{len(widths)}"
        out.mkdir()
        (path,) = accuracy_curves(build_table([run], ["method", "dataset", "partition"]), out)
        widths[method] = image.imread(path).shape[1]
    short, long = widths.values()
    assert long > short + 100  # the legend grows the file instead of running off its edge


def test_the_timeline_draws_every_client_and_marks_the_membership_events(tmp_path):
    events = [
        event(4.1, "crash", 1, 1),
        event(4.2, "bypass", 1, 1),
        event(6.0, "hang", 2, 2),
        event(6.1, "bypass", 2, 2),
        event(7.0, "join", 3, 4),
        event(7.5, "healed", -1, 4),  # not drawn
    ]
    make_run(tmp_path / "a", clients=3, rounds=6, events=events)
    run = load_run(tmp_path / "a")
    figure = timeline_figure(run)
    (axis,) = figure.axes
    labels = [t.get_text() for t in axis.get_legend().get_texts()]
    assert labels == ["client 0", "client 1", "client 2", "crash", "bypass", "hang", "join"]
    client_lines = [line for line in axis.get_lines() if line.get_label().startswith("client")]
    finished = defaultdict(list)
    for row in run.rows:
        finished[row.client].append(row.round + 1)
    assert [list(line.get_ydata()) for line in client_lines] == [finished[c] for c in range(3)]
    path = ring_timeline(run, tmp_path / "timeline.png")
    assert_png(path)


def test_the_timeline_draws_delays_and_offline_periods_for_their_duration(tmp_path):
    events = [
        {**event(1.0, "offline", 2, 1), "duration_s": 2.5},
        {**event(0.5, "compute_delay", 0, 1), "duration_s": 0.75},
        {**event(0.2, "link_delay", 1, 0), "duration_s": 0.1},
        event(3.6, "rejoin", 2, 1),
    ]
    make_run(tmp_path / "a", clients=3, rounds=6, events=events)
    run = load_run(tmp_path / "a")
    assert [e.duration_s for e in run.events] == [2.5, 0.75, 0.1, 0.0]
    (axis,) = timeline_figure(run).axes
    spans = {
        c.get_label(): c.get_segments()[0].tolist()
        for c in axis.collections
        if hasattr(c, "get_segments")
    }
    assert spans["offline"] == [[1.0, 2.0], [3.5, 2.0]]  # after its 2nd round
    assert spans["compute_delay"] == [[0.5, 1.0], [1.25, 1.0]]  # in its 2nd round
    assert np.allclose(spans["link_delay"], [[0.2, 1.0], [0.3, 1.0]])
