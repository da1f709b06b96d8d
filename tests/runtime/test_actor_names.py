"""Actor names let a restarted actor find its peers."""

from __future__ import annotations

from ring_actors.runtime.actor_names import actor_name


def test_actor_names_are_unique_per_run_and_role():
    names = {actor_name(run, role) for run in ("a1", "b2") for role in ("coordinator", "client-0")}
    assert len(names) == 4
