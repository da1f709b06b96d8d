"""The client actor's probes answer on threads that peers' receives cannot take."""

from __future__ import annotations

from ring_actors.runtime.client_actor import CONCURRENCY_GROUPS, CONTROL_GROUP, ClientActor
from ring_actors.runtime.experiment import CLIENT


def test_ping_and_journal_run_in_a_group_of_their_own():
    for method in (ClientActor.ping, ClientActor.journal):
        assert method.__ray_concurrency_group__ == CONTROL_GROUP
    assert not hasattr(ClientActor.receive, "__ray_concurrency_group__")
    assert CONCURRENCY_GROUPS[CONTROL_GROUP] >= 1
    groups = CLIENT.__ray_metadata__.method_meta.concurrency_group_for_methods
    assert groups["ping"] == CONTROL_GROUP and groups["journal"] == CONTROL_GROUP
