"""Checkpoint files are written atomically and read back whole."""

from __future__ import annotations

from ring_actors.recovery import actor_name, load, save_atomic


def test_save_then_load_round_trips_and_replaces(tmp_path):
    path = tmp_path / "deep" / "state.ckpt"
    assert load(path) is None
    save_atomic(path, {"epoch": 3, "rows": [1, 2]})
    save_atomic(path, {"epoch": 4, "rows": [1, 2, 3]})
    assert load(path) == {"epoch": 4, "rows": [1, 2, 3]}
    assert [p.name for p in path.parent.iterdir()] == ["state.ckpt"]  # no temp file left


def test_actor_names_are_unique_per_run_and_role():
    names = {actor_name(run, role) for run in ("a1", "b2") for role in ("coordinator", "client-0")}
    assert len(names) == 4
