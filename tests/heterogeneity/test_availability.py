"""Availability: clients that go offline and come back, on the in-process ring with short
times; a client's budget and off periods on the run's clock; and a deadline on every call a
client makes to the coordinator to leave or come back."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import Future

import pytest
import torch

from ring_actors.client.core import ClientCore
from ring_actors.client.method_factory import build_algorithm
from ring_actors.config import config_from_dict
from ring_actors.delivery.view import View
from ring_actors.in_process import InProcessRing
from tests.helpers.in_process_ring import CLASSES, SHAPE, client_data


def offline(tmp_path, periods: dict[int, list[list[float]]]) -> dict:
    """A ``heterogeneity`` section whose trace has these clients offline over these spans."""
    trace = tmp_path / "availability.json"
    trace.write_text(json.dumps({"availability": {str(c): p for c, p in periods.items()}}))
    return {"trace": str(trace)}


def budgeted(tmp_path, heterogeneity, budget_s, count=2, reserve=0, faults=(), **schedule):
    """A ring that runs as many rounds as fit in ``budget_s`` wall seconds."""
    config = config_from_dict(
        {
            "experiment": {"name": "availability", "rounds": 10_000, "time_budget_s": budget_s},
            "clients": {"count": count, "reserve": reserve, "batch_size": 16},
            "algorithm": {"name": "dfedavg"},
            "schedule": {"hop_timeout_s": 2.0, "heartbeat_s": 0.1, **schedule},
            "heterogeneity": heterogeneity,
            "faults": list(faults),
        }
    )
    return InProcessRing(config, client_data(count + reserve), CLASSES, SHAPE, tmp_path)


def events(run, kind: str, client: int | None = None) -> list[dict]:
    return [
        e
        for e in run.coordinator.results.events
        if e["kind"] == kind and client in (None, e["client"])
    ]


def trained_at(run, client: int) -> list[float]:
    """When each of the client's rounds was reported, on the run's clock."""
    return [r["time_s"] for r in run.coordinator.results.rows if r["client"] == client]


@pytest.mark.slow
def test_a_ring_whose_every_member_is_offline_at_once_waits_for_them_to_come_back(tmp_path):
    run = budgeted(tmp_path, offline(tmp_path, {0: [[0.5, 1.5]], 1: [[0.5, 1.5]]}), 4.0)
    run.run(timeout_s=60)
    assert run.coordinator.stop_reason is None
    assert sorted(e["client"] for e in events(run, "offline")) == [0, 1]
    for client in (0, 1):
        assert max(trained_at(run, client)) > 1.5  # back, and training again


@pytest.mark.slow
def test_an_off_period_that_starts_mid_round_is_applied_when_it_starts(tmp_path):
    """Client 0's rounds take over 3 s; its device goes away 0.5 s into its first: it leaves
    the ring then (nobody waits for it), reports nothing of that round, and trains again
    once the period is over."""
    slow = {"at_round": 0, "slow": [0], "delay_s": 3.0}
    run = budgeted(tmp_path, offline(tmp_path, {0: [[0.5, 2.0]]}), 6.0, faults=[slow])
    run.run(timeout_s=60)
    (away,) = events(run, "offline", client=0)
    assert away["duration_s"] > 0 and away["time_s"] < 1.5  # at its start, not the round's end
    assert min(trained_at(run, 0)) > 2.0  # the round it was in was not reported
    assert not events(run, "offline", client=1)
    assert run.coordinator.stop_reason is None


@pytest.mark.slow
def test_a_joiner_counts_its_budget_and_its_off_periods_from_the_runs_start(tmp_path):
    run = budgeted(tmp_path, offline(tmp_path, {2: [[0.2, 0.6]]}), 3.0, reserve=1)
    run.start()
    try:
        while run.coordinator.results.now() < 1.5:
            time.sleep(0.02)
        run.join(1)
        assert run.wait(60).stopped is None
    finally:
        run.close()
    assert not events(run, "offline", client=2)  # its period was over before it joined
    joined = trained_at(run, 2)
    assert joined and min(joined) >= 1.5
    assert max(joined) < 4.0  # its own clock would have run to 1.5 + 3 s


@pytest.mark.slow
def test_a_client_whose_come_back_goes_unanswered_trains_on_and_is_taken_back(tmp_path):
    """The coordinator keeps it offline until it is overdue by the stall limit (1 s), then
    bypasses it as hung; its next report splices it in again."""
    trace = offline(tmp_path, {0: [[0.3, 1.5]]})
    run = budgeted(tmp_path, trace, 5.0, hop_timeout_s=0.5, stall_hops=2)
    come_back = run.coordinator.come_back

    def unanswered(client_id, round_):
        if client_id == 0:
            raise TimeoutError("no answer in time")
        return come_back(client_id, round_)

    run.coordinator.come_back = unanswered
    run.run(timeout_s=60)
    assert run.coordinator.stop_reason is None
    (away,) = events(run, "offline", client=0)
    (hang,) = events(run, "hang", client=0)
    assert away["duration_s"] > 0 and hang["time_s"] > away["time_s"] + away["duration_s"] + 1
    assert "not back from offline" in hang["detail"]
    (back,) = events(run, "rejoin", client=0)
    assert back["time_s"] > hang["time_s"]
    assert 0 in run.coordinator.table.live
    assert max(trained_at(run, 0)) > back["time_s"]


class Coordinator:
    """The coordinator's side of one client's control link: the run's clock, and what the
    client told it."""

    def __init__(self, elapsed_s: float) -> None:
        self.elapsed_s = elapsed_s
        self.leaves: list[float] = []
        self.events: list[tuple[str, dict]] = []
        self.failed: list[str] = []

    def run_clock(self) -> Future[float]:
        answer: Future[float] = Future()
        answer.set_result(self.elapsed_s)
        return answer

    def leave(self, client_id, round_, off_s) -> None:
        self.leaves.append(off_s)

    def come_back(self, client_id, round_) -> None:
        return None  # nobody else in the ring: it goes on alone

    def report_event(self, kind, client_id, round_, detail="", **measured) -> None:
        self.events.append((kind, measured))

    def report_failed(self, client_id, round_, error) -> None:
        self.failed.append(error)

    def report_round(self, *args) -> None: ...

    def report_done(self, *args) -> None: ...

    def report_unreachable(self, *args) -> None: ...


@pytest.mark.slow
@pytest.mark.parametrize("how", ["resumed", "restarted"])
def test_a_client_back_from_a_restart_takes_the_runs_clock(tmp_path, how):
    """2 s of the run had passed: its first off period is history and its budget nearly
    spent; only the second period, under way or still to come, is its to apply."""
    config = config_from_dict(
        {
            "experiment": {"rounds": 10_000, "time_budget_s": 2.6},
            "clients": {"count": 2, "batch_size": 16},
            "algorithm": {"name": "local"},
            "heterogeneity": offline(tmp_path, {0: [[1.0, 1.5], [2.1, 2.3]]}),
        }
    )
    data = client_data(1)[0]
    method = build_algorithm(config, 0, CLASSES, SHAPE, torch.device("cpu"))
    coordinator = Coordinator(elapsed_s=2.0)
    client = ClientCore(0, config, method, data, coordinator, run_clock=coordinator.run_clock)
    client.set_view(View(1, (0,), (0,)), {})
    client.progress.completed = 3  # as restored from its checkpoint of round 3
    if how == "resumed":
        client.resume()
    else:
        client.start(first_round=4)
    client.thread.join(30)
    assert not client.thread.is_alive() and not coordinator.failed
    missed = [m for kind, m in coordinator.events if kind == "offline"]
    assert len(coordinator.leaves) + len(missed) == 1  # the second period only
    assert all(off_s <= 0.2 + 1e-6 for off_s in coordinator.leaves)
    assert all((m["from_s"], m["to_s"]) == (2.1, 2.3) for m in missed)


@pytest.mark.slow
def test_a_clients_calls_to_leave_and_come_back_end_at_their_deadline(ray_local):
    """A coordinator that never answers (being restarted, say) holds no client for good."""
    from ring_actors.runtime.client_actor import BoundedControlLink

    @ray_local.remote
    class Unanswering:
        def leave(self, *args) -> None:
            threading.Event().wait()

        def come_back(self, *args) -> None:
            threading.Event().wait()

        def rejoin(self, *args) -> None:
            threading.Event().wait()

        def run_elapsed_s(self) -> float:
            threading.Event().wait()
            return 0.0

    actor = Unanswering.options(max_concurrency=8).remote()
    link = BoundedControlLink(actor, timeout_s=0.5)
    calls = {
        "leave": lambda: link.leave(0, 1, 2.0),
        "come_back": lambda: link.come_back(0, 1),
        "rejoin": lambda: link.rejoin(0, None, "node", None),
        "run_elapsed_s": lambda: link.run_elapsed_s().result(0.5),
    }
    ended: dict[str, BaseException | None] = {}

    def call(name: str) -> None:
        try:
            calls[name]()
            ended[name] = None
        except Exception as err:  # noqa: BLE001 - what it ended with is the assertion
            ended[name] = err

    threads = [threading.Thread(target=call, args=(name,), daemon=True) for name in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    ray_local.kill(actor)
    assert set(ended) == set(calls)  # every call came back
    assert all(isinstance(err, TimeoutError) for err in ended.values()), ended
