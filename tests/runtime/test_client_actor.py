"""The client actor's probes answer on threads that peers' receives cannot take, and its
round reports reach the coordinator before the round ends."""

from __future__ import annotations

import time

import pytest

from ring_actors.runtime.client_actor import (
    CONCURRENCY_GROUPS,
    CONTROL_GROUP,
    BoundedControlLink,
    ClientActor,
)
from ring_actors.runtime.experiment import CLIENT


def test_ping_and_journal_run_in_a_group_of_their_own():
    for method in (ClientActor.ping, ClientActor.journal):
        assert method.__ray_concurrency_group__ == CONTROL_GROUP
    assert not hasattr(ClientActor.receive, "__ray_concurrency_group__")
    assert CONCURRENCY_GROUPS[CONTROL_GROUP] >= 1
    groups = CLIENT.__ray_metadata__.method_meta.concurrency_group_for_methods
    assert groups["ping"] == CONTROL_GROUP and groups["journal"] == CONTROL_GROUP


@pytest.mark.slow
def test_a_rounds_report_is_held_by_the_coordinator_when_the_round_ends(ray_local):
    """A client that crashes right after a round (the fault plan's crash at the next round's
    start) must not take that round's result with it: the report is acknowledged, not only
    sent. A coordinator that cannot answer holds the round for ``timeout_s`` at most."""

    @ray_local.remote
    class SlowCoordinator:
        def __init__(self) -> None:
            self.rounds: list[tuple[int, int]] = []

        def report_round(self, client_id: int, round_: int, metrics: dict) -> None:
            time.sleep(0.5)
            self.rounds.append((client_id, round_))

        def held(self) -> list[tuple[int, int]]:
            return self.rounds

    coordinator = SlowCoordinator.options(max_concurrency=2).remote()
    BoundedControlLink(coordinator, timeout_s=10).report_round(2, 0, {"loss": 1.0})
    assert ray_local.get(coordinator.held.remote()) == [(2, 0)]

    ray_local.kill(coordinator)
    started = time.monotonic()
    BoundedControlLink(coordinator, timeout_s=1).report_round(2, 1, {"loss": 1.0})  # no raise
    assert time.monotonic() - started < 5
