"""The report folder: report.md with the table, the partial runs, the runs and the figures."""

from __future__ import annotations

import pytest

from ring_actors.report.build import write_report
from ring_actors.report.runs import load_run
from tests.helpers.run_folders import make_run


def test_the_report_links_every_figure_it_wrote_and_lists_partial_runs(tmp_path):
    make_run(tmp_path / "runs" / "a", "dfedavg", 0)
    make_run(tmp_path / "runs" / "b", "drdfl", 0, rounds=8, completed=5)
    make_run(tmp_path / "other" / "a", "drdfl", 1)  # the same directory name as another run
    runs = [load_run(p) for p in (tmp_path / "runs/a", tmp_path / "runs/b", tmp_path / "other/a")]
    files = write_report(runs, ["method", "dataset", "partition"], tmp_path / "out")
    report, figures = files[0], files[1:]
    assert report.name == "report.md"
    assert sorted(f.name for f in figures) == [
        "curves-fashion-mnist_shard_s2-by-time.png",
        "curves-fashion-mnist_shard_s2.png",
        "timeline-a-2.png",
        "timeline-a.png",
        "timeline-b.png",
    ]
    text = report.read_text()
    for figure in figures:
        assert figure.is_file() and f"]({figure.name})" in text
    assert f"- `{tmp_path / 'runs' / 'b'}`: 5 of 8 rounds" in text
    assert "| drdfl |" in text and "| dfedavg |" in text
    assert text.count("| 5/8 |") == 1  # the partial run's row in the list of runs


def test_no_runs_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="no runs"):
        write_report([], ["method"], tmp_path)


def test_a_run_stopped_before_any_evaluation_still_gets_its_row(tmp_path):
    make_run(tmp_path / "runs" / "a", "drdfl", rounds=4, completed=0, stopped="no client left")
    files = write_report([load_run(tmp_path / "runs" / "a")], ["method"], tmp_path / "out")
    text = files[0].read_text()
    assert "| drdfl | – † | – † | 0.00 M (0.00 MB) |" in text
    assert "0/4" in text and (tmp_path / "out" / "timeline-a.png").is_file()
