"""Run directories load into typed records; partial runs say why."""

from __future__ import annotations

import pytest

from ring_actors.report.runs import find_runs, load_run, load_runs, partition_label
from tests.helpers.run_folders import event, make_run


def test_a_run_directory_loads_into_typed_records(tmp_path):
    events = [event(3.5, "crash", 1, 1), event(3.5, "bypass", 1, 1)]
    rows = make_run(tmp_path / "a", method="drdfl", seed=3, clients=3, rounds=4, events=events)
    run = load_run(tmp_path / "a")
    assert (run.name, run.method, run.dataset, run.seed) == ("a", "drdfl", "fashion-mnist", 3)
    assert run.partition == "shard s=2"
    assert (run.rounds_planned, run.rounds_completed, run.partial) == (4, 4, None)
    assert [(r.client, r.round, r.local_acc, r.global_acc) for r in run.rows] == [
        (r["client"], r["round"], r["local_acc"], r["global_acc"]) for r in rows
    ]
    assert [(e.kind, e.client, e.round, e.time_s) for e in run.events] == [
        ("crash", 1, 1, 3.5),
        ("bypass", 1, 1, 3.5),
    ]


def test_fewer_rounds_than_planned_or_a_stop_make_a_run_partial(tmp_path):
    make_run(tmp_path / "short", rounds=5, completed=3)
    make_run(tmp_path / "stopped", rounds=5, completed=2, stopped="client 0 failed")
    assert load_run(tmp_path / "short").partial == "3 of 5 rounds"
    assert load_run(tmp_path / "stopped").partial == "stopped: client 0 failed"


def test_a_run_that_ended_at_its_time_budget_is_not_partial(tmp_path):
    """10,000 rounds planned, as many as 20 s allow: 21 is what was planned, not a part."""
    make_run(tmp_path / "budgeted", rounds=10_000, completed=21, time_budget_s=20.0)
    make_run(tmp_path / "stopped", rounds=10_000, completed=3, time_budget_s=20.0, stopped="x")
    assert load_run(tmp_path / "budgeted").partial is None
    assert load_run(tmp_path / "stopped").partial == "stopped: x"


def test_a_folder_of_runs_is_searched_and_a_run_is_taken_once(tmp_path):
    for name in ("sweep/b", "sweep/a", "sweep/deeper/c"):
        make_run(tmp_path / name)
    (tmp_path / "sweep" / "not-a-run").mkdir()
    found = find_runs([tmp_path / "sweep", tmp_path / "sweep" / "a"])
    assert found == [tmp_path / "sweep" / n for n in ("a", "b", "deeper/c")]
    with pytest.raises(FileNotFoundError, match="missing"):
        find_runs([tmp_path / "missing"])


def test_a_missing_events_table_counts_as_no_events(tmp_path):
    make_run(tmp_path / "a", rounds=2)
    (tmp_path / "a" / "events.parquet").unlink()
    run = load_run(tmp_path / "a")
    assert run.events == () and len(run.rows) == 6


@pytest.mark.parametrize(
    ("partition", "label"),
    [
        ({"kind": "dirichlet", "beta": 0.1}, "dir β=0.1"),
        ({"kind": "shard", "classes_per_client": 4}, "shard s=4"),
        ({"kind": "iid"}, "iid"),
    ],
)
def test_partitions_get_the_papers_short_names(partition, label):
    assert partition_label(partition) == label


def test_a_run_with_a_torn_file_is_left_out_with_a_warning_and_the_rest_load(tmp_path, caplog):
    make_run(tmp_path / "a", rounds=2)
    make_run(tmp_path / "b", rounds=2)
    (tmp_path / "b" / "summary.json").write_text('{"rounds_comp')
    make_run(tmp_path / "c", rounds=2)
    data = (tmp_path / "c" / "events.parquet").read_bytes()
    (tmp_path / "c" / "events.parquet").write_bytes(data[: len(data) // 2])
    runs = load_runs([tmp_path])
    assert [r.name for r in runs] == ["a"]
    assert "b" in caplog.text and "c" in caplog.text and "torn" in caplog.text
