"""A client takes the run's clock as its loop begins: a coordinator that does not answer at
first (being restarted as the client starts, resumes, joins or restarts) is asked again, and
one that never answers leaves the client counting on its own clock, not failed."""

from __future__ import annotations

import logging
import math
from concurrent.futures import Future

import torch

from ring_actors.client.core import ClientCore
from ring_actors.client.method_factory import build_algorithm
from ring_actors.config import config_from_dict
from ring_actors.delivery.view import View
from tests.helpers.in_process_ring import CLASSES, SHAPE, client_data

ELAPSED_S = 100.0  # how far the run is by the coordinator's clock


class Coordinator:
    """The coordinator's side of a lone client's control link, whose run's clock leaves the
    first ``silent`` calls unanswered (it is being restarted), then answers."""

    def __init__(self, silent: float) -> None:
        self.silent = silent
        self.asked = 0
        self.failed: list[str] = []
        self.done = 0

    def run_clock(self) -> Future[float]:
        self.asked += 1
        answer: Future[float] = Future()
        if self.asked > self.silent:
            answer.set_result(ELAPSED_S)
        return answer  # unanswered: its result times out

    def report_failed(self, client_id, round_, error) -> None:
        self.failed.append(error)

    def report_done(self, *args) -> None:
        self.done += 1

    def report_event(self, *args, **measured) -> None: ...

    def report_round(self, *args) -> None: ...

    def report_unreachable(self, *args) -> None: ...


def lone_client(coordinator: Coordinator, budget_s: float) -> ClientCore:
    """Client 0 alone in the view, its loop ended by the time budget; every control call bounded by
    0.4 s, the run's clock asked again for 2 s (hop timeout 0.2 s)."""
    config = config_from_dict(
        {
            "experiment": {"rounds": 10_000, "time_budget_s": budget_s},
            "clients": {"count": 2, "batch_size": 16},
            "algorithm": {"name": "local"},
            "schedule": {"hop_timeout_s": 0.2},
        }
    )
    method = build_algorithm(config, 0, CLASSES, SHAPE, torch.device("cpu"))
    client = ClientCore(
        0, config, method, client_data(1)[0], coordinator, run_clock=coordinator.run_clock
    )
    client.set_view(View(1, (0,), (0,)), {})
    return client


def test_a_run_clock_unanswered_at_first_is_asked_again_and_taken():
    coordinator = Coordinator(silent=2)
    client = lone_client(coordinator, budget_s=ELAPSED_S + 0.5)
    client.start()
    client.thread.join(30)
    assert not client.thread.is_alive()
    assert not coordinator.failed, coordinator.failed[0]
    assert coordinator.asked == 3 and coordinator.done == 1
    assert client.availability.run_s() >= ELAPSED_S  # on the run's clock: its budget nearly spent


def test_a_run_clock_never_answered_leaves_the_client_on_its_own_clock_with_one_warning(caplog):
    coordinator = Coordinator(silent=math.inf)
    client = lone_client(coordinator, budget_s=3.0)
    built_at = client.availability.run_started_at
    with caplog.at_level(logging.WARNING, logger="ring_actors.client.availability"):
        client.start()
        client.thread.join(30)
    assert not client.thread.is_alive()
    assert not coordinator.failed, coordinator.failed[0]
    assert coordinator.asked >= 2 and coordinator.done == 1
    assert client.availability.run_started_at == built_at  # counted from its own start
    assert client.completed >= 0  # it trained within what was left of its budget
    (warning,) = [r for r in caplog.records if "run's clock" in r.getMessage()]
    assert warning.levelno == logging.WARNING
