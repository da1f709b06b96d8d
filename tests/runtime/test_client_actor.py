"""The client actor's probes answer on threads that peers' receives cannot take, its round
reports reach the coordinator before the round ends, and a restarted client's rejoin rides out
a coordinator that is restarting too."""

from __future__ import annotations

import os
import threading
import time
import warnings

import pytest
import ray

from ring_actors.config import ScheduleSection
from ring_actors.delivery.transport import Readmission
from ring_actors.delivery.view import View
from ring_actors.runtime.client_actor import (
    CONCURRENCY_GROUPS,
    CONTROL_GROUP,
    BoundedControlLink,
    ClientActor,
    rejoin_until_answered,
    was_restarted,
)
from ring_actors.runtime.experiment import CLIENT
from ring_actors.timeouts import Timeouts

# Each call bounded by 0.5 s, a rejoin asked again for 2.5 s.
TIMEOUTS = Timeouts.from_schedule(ScheduleSection(hop_timeout_s=0.25))
# Each ask bounded by 2 s, given up after 10: a trivial actor call on a loaded machine can
# take longer than TIMEOUTS' 0.5 s every time for 2.5 s.
ROOMY = Timeouts.from_schedule(ScheduleSection(hop_timeout_s=1.0))


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


@pytest.mark.slow
def test_a_restarted_clients_rejoin_is_asked_again_until_the_coordinator_answers(ray_local):
    """The first rejoin reaches a coordinator still restoring its record (it answers late);
    the client asks again rather than die in its constructor."""

    @ray_local.remote
    class RestartingCoordinator:
        def __init__(self) -> None:
            self.asked = 0

        def rejoin(self, client_id, handle, node_id, checkpoint_round) -> Readmission:
            self.asked += 1
            if self.asked == 1:
                time.sleep(5.0)
            return Readmission(checkpoint_round + 1, None, View(4, (client_id,), (0,)), {})

        def times_asked(self) -> int:
            return self.asked

    coordinator = RestartingCoordinator.options(max_concurrency=4).remote()
    assert ROOMY.client_control_s < 5.0 < ROOMY.control_give_up_s  # the first ask times out
    control = BoundedControlLink(coordinator, ROOMY.client_control_s)
    back = rejoin_until_answered(control, ROOMY, 3, None, "node", 7)
    assert back is not None and back.first_round == 8 and back.view.epoch == 4
    # Asked again at least once (more where a loaded machine let a second ask time out too).
    assert ray_local.get(coordinator.times_asked.remote()) >= 2
    ray_local.kill(coordinator)


@pytest.mark.slow
def test_a_rejoin_never_answered_ends_at_its_deadline_naming_it(ray_local):
    @ray_local.remote
    class Gone:
        def rejoin(self, *args) -> None:
            threading.Event().wait()

    coordinator = Gone.options(max_concurrency=8).remote()
    control = BoundedControlLink(coordinator, TIMEOUTS.client_control_s)
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="did not answer its rejoin in 2.5 s"):
        rejoin_until_answered(control, TIMEOUTS, 3, None, "node", 7)
    took, give_up = time.monotonic() - started, TIMEOUTS.control_give_up_s
    assert give_up - TIMEOUTS.client_control_s <= took < give_up + 3  # the last pause aside
    ray_local.kill(coordinator)


@ray.remote(num_cpus=0, max_restarts=1)
class AsksWhetherRestarted:
    """Reads what the client actor's constructor reads, recording every warning on the way."""

    def __init__(self) -> None:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            self.restarted = was_restarted(ray.get_runtime_context())
        self.warned = [str(w.message) for w in caught]

    def answer(self) -> tuple[bool, list[str]]:
        return self.restarted, self.warned

    def crash(self) -> None:
        os._exit(1)


@pytest.mark.slow
def test_whether_ray_restarted_a_client_is_read_without_rays_deprecation_warning(ray_local):
    actor = AsksWhetherRestarted.remote()
    assert ray.get(actor.answer.remote()) == (False, [])
    actor.crash.remote()
    deadline = time.monotonic() + 60
    while True:  # Ray restarts it in a new process
        try:
            assert ray.get(actor.answer.remote(), timeout=30) == (True, [])
            break
        except ray.exceptions.RayActorError:
            assert time.monotonic() < deadline
            time.sleep(0.2)
    ray.kill(actor)
