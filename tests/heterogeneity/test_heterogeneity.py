"""The heterogeneity model: speeds, links and availability as configured, applied by the
real client and coordinator cores in one process with short times."""

from __future__ import annotations

import itertools
import json
import math
import random
import time
import tracemalloc
from concurrent.futures import Future

import pytest
import torch

from ring_actors.config import ConfigError, config_from_dict
from ring_actors.delivery.payloads import Payload
from ring_actors.heterogeneity.links import Deferred, LinkedHandle, LinkScheduler
from ring_actors.heterogeneity.model import Heterogeneity
from ring_actors.heterogeneity.section import (
    MAX_SPREAD,
    MIN_MEAN_PERIOD_S,
    AvailabilitySection,
    ComputeSection,
    HeterogeneitySection,
    LinksSection,
)
from ring_actors.heterogeneity.trace_file import (
    MAX_COMPUTE_FACTOR,
    MAX_LATENCY_S,
    MAX_LINK_DELAY_S,
    MAX_RUN_CLOCK_S,
    MIN_BANDWIDTH_BYTES_S,
)
from tests.helpers.heterogeneous_ring import budgeted, events, ring


def model(section: HeterogeneitySection, total: int = 12, seed: int = 0) -> Heterogeneity:
    return Heterogeneity(section, seed, total)


def test_drawn_speeds_are_seeded_with_the_fastest_at_one():
    section = HeterogeneitySection(compute=ComputeSection(distribution="lognormal", spread=1.4))
    factors = model(section).factors
    assert factors == model(section).factors  # every client computes the same draw
    assert min(factors) == 1.0 and max(factors) > 3.0
    assert factors != model(section, seed=1).factors


def test_a_fixed_list_and_a_trace_override_the_draw(tmp_path):
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps({"compute": {"3": 8.0}}))
    section = HeterogeneitySection(compute=ComputeSection(factors=(2.0, 1.0)), trace=str(trace))
    m = model(section, total=4)
    assert m.factors == [2.0, 1.0, 1.0, 8.0]
    assert m.compute_delay(0, 0.5) == pytest.approx(0.5)
    assert m.compute_delay(3, 0.5) == pytest.approx(3.5)
    assert m.compute_delay(1, 0.5) == 0.0


def test_a_hop_takes_latency_plus_bytes_over_bandwidth(tmp_path):
    trace = tmp_path / "trace.json"
    trace.write_text(
        json.dumps(
            {
                "latency_s": [[0, 0.5], [0.25, 0]],
                "links": [{"from": 0, "to": 1, "bandwidth_bytes_s": 1000}],
            }
        )
    )
    links = LinksSection(latency_s=0.01, bandwidth_bytes_s=1e6)
    m = model(HeterogeneitySection(links=links, trace=str(trace)), total=3)
    assert m.hop_s(0, 1, 2000) == pytest.approx(0.5 + 2.0)
    assert m.hop_s(1, 0, 2000) == pytest.approx(0.25 + 0.002)
    assert m.hop_s(2, 0, 2000) == pytest.approx(0.01 + 0.002)  # not in the trace


def test_drawn_availability_is_seeded_and_offline_about_the_configured_share():
    section = HeterogeneitySection(
        availability=AvailabilitySection(mean_online_s=40.0, mean_offline_s=10.0, clients=(1,))
    )
    m = model(section)
    periods = m.offline_periods(1)
    first = list(itertools.islice(periods, 100))
    assert first == list(itertools.islice(model(section).offline_periods(1), 100))
    assert m.offline_periods(0) == []  # not listed: always online
    horizon = 50_000.0
    off = sum(
        min(b, horizon) - a for a, b in itertools.takewhile(lambda p: p[0] < horizon, periods)
    )
    assert 0.15 < off / horizon < 0.25  # 10 / (40 + 10)
    start, end = periods[0]
    assert m.offline_until(1, start) == end and m.offline_until(1, start - 1e-3) is None
    assert m.offline_until(1, end) is None and m.offline_until(1, periods[1][0]) == periods[1][1]


def test_drawn_periods_are_the_seeded_stream_and_go_on_past_any_horizon():
    availability = AvailabilitySection(mean_online_s=86_400.0, mean_offline_s=3_600.0)
    periods = model(HeterogeneitySection(availability=availability), seed=7).offline_periods(2)
    rng, t, expected = random.Random("7:availability:2"), 0.0, []
    for _ in range(30):  # online ~Exp(a day), then offline ~Exp(an hour), one stream per client
        start = t + rng.expovariate(1 / 86_400.0)
        t = start + rng.expovariate(1 / 3_600.0)
        expected.append((start, t))
    assert [periods[i] for i in range(30)] == expected
    assert periods[29][0] > 7 * 24 * 3600.0  # well past a week, as far as a run reaches
    (start, end) = periods[29]
    assert (
        model(HeterogeneitySection(availability=availability), seed=7).offline_until(2, start)
        == end
    )  # an offline_until this far draws up to there, the same periods


def test_short_drawn_periods_are_drawn_only_as_far_as_they_are_read():
    availability = AvailabilitySection(mean_online_s=0.5, mean_offline_s=0.5)
    tracemalloc.start()
    try:
        m = model(HeterogeneitySection(availability=availability), total=2)
        for client in range(2):
            periods = m.offline_periods(client)
            assert periods[0] < periods[9]
            back = m.offline_until(client, 60.0)  # reads on to the period around 60 s
            assert back is None or back > 60.0
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000  # about a hundred periods, not a week's worth per client


@pytest.mark.parametrize(
    "section, key",
    [
        ({"compute": {"distribution": "pareto"}}, "heterogeneity.compute.distribution"),
        ({"compute": {"factors": [1, 0.5]}}, "heterogeneity.compute.factors"),
        ({"links": {"bandwidth_bytes_s": 0}}, "heterogeneity.links.bandwidth_bytes_s"),
        ({"availability": {"mean_online_s": 5}}, "heterogeneity.availability.mean_offline_s"),
        (
            {"compute": {"distribution": "lognormal", "spread": 1000}},
            "heterogeneity.compute.spread",
        ),
        ({"compute": {"spread": 3.5}}, "heterogeneity.compute.spread"),
        ({"links": {"distribution": "lognormal", "spread": 1000}}, "heterogeneity.links.spread"),
        (
            {"availability": {"mean_online_s": 1e-320, "mean_offline_s": 1e-320}},
            "heterogeneity.availability.mean_online_s",
        ),
        (
            {"availability": {"mean_online_s": 5, "mean_offline_s": 0.001}},
            "heterogeneity.availability.mean_offline_s",
        ),
        ({"availability": {"clients": [8]}}, "heterogeneity.availability.clients"),
        ({"trace": "/no/such/trace.json"}, "heterogeneity.trace"),
        ({"speed": 2}, "heterogeneity.speed"),
    ],
)
def test_a_wrong_value_names_its_key_before_anything_starts(section, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        config_from_dict({"clients": {"count": 8}, "heterogeneity": section})


LATENCY_RANGE = f"heterogeneity.links.latency_s: must be a number in [0, {MAX_LATENCY_S:g}]"
PERIOD_RANGE = f"a number in [{MIN_MEAN_PERIOD_S:g}, {MAX_RUN_CLOCK_S:g}] (seconds)"


@pytest.mark.parametrize(
    "section, refusal",
    [
        ({"links": {"latency_s": 1e10}}, LATENCY_RANGE),
        ({"links": {"latency_s": 1e6, "distribution": "lognormal", "spread": 3}}, LATENCY_RANGE),
        (
            {"links": {"bandwidth_bytes_s": 1e-300}},
            "heterogeneity.links.bandwidth_bytes_s: must be null or a number >= "
            f"{MIN_BANDWIDTH_BYTES_S:g}",
        ),
        (
            {"compute": {"factors": [2, 1e300]}},
            f"heterogeneity.compute.factors: must be a list of numbers in [1, "
            f"{MAX_COMPUTE_FACTOR:g}] (1 = full speed), got [1e+300]",
        ),
        (
            {"availability": {"mean_online_s": 1e10, "mean_offline_s": 5}},
            f"heterogeneity.availability.mean_online_s: must be null or {PERIOD_RANGE}",
        ),
        (
            {"availability": {"mean_online_s": 5, "mean_offline_s": 1e10}},
            "heterogeneity.availability.mean_offline_s: must be a number in "
            f"[0, {MAX_RUN_CLOCK_S:g}] (seconds)",
        ),
    ],
)
def test_a_value_past_its_bound_is_refused_naming_the_key_and_the_range(section, refusal):
    """Values no real federation has: a wait built from one would overflow a timer."""
    with pytest.raises(ConfigError) as raised:
        config_from_dict({"clients": {"count": 4}, "heterogeneity": section})
    assert str(raised.value).startswith(refusal), raised.value


def test_drawn_factors_and_computed_hops_stay_within_their_bounds():
    """The widest draws' tails and a slow link's largest payloads are capped, not refused:
    the config's values are all allowed."""
    compute = ComputeSection(distribution="lognormal", spread=MAX_SPREAD)
    links = LinksSection(
        MAX_LATENCY_S, MIN_BANDWIDTH_BYTES_S, distribution="lognormal", spread=MAX_SPREAD
    )
    m = model(HeterogeneitySection(compute=compute, links=links), total=2000)
    assert MAX_COMPUTE_FACTOR in m.factors and max(m.factors) == MAX_COMPUTE_FACTOR
    hops = [m.hop_s(a, a + 1, 10**9) for a in range(200)]
    assert max(hops) == MAX_LINK_DELAY_S and min(hops) > 0
    assert all(0 < m.link(a, a + 1)[0] <= MAX_LINK_DELAY_S for a in range(2000 - 1))


def test_a_trace_naming_an_unknown_client_is_refused(tmp_path):
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps({"availability": {"9": [[1, 2]]}}))
    with pytest.raises(ConfigError, match=r"availability: must be client ids in \[0, 4\)"):
        config_from_dict({"clients": {"count": 4}, "heterogeneity": {"trace": str(trace)}})


def test_the_widest_spreads_draw_finite_factors_and_links():
    compute = ComputeSection(distribution="lognormal", spread=MAX_SPREAD)
    links = LinksSection(1.0, 1e6, distribution="lognormal", spread=MAX_SPREAD)
    m = model(HeterogeneitySection(compute=compute, links=links), total=200)
    assert all(math.isfinite(f) and f >= 1 for f in m.factors) and min(m.factors) == 1.0
    drawn = [m.link(a, b) for a in range(200) for b in range(200) if a != b]
    assert all(0 < lat < math.inf and bw is not None and 0 < bw < math.inf for lat, bw in drawn)


class Recorder:
    """A peer that records when each payload reached it."""

    def __init__(self) -> None:
        self.arrivals: list[tuple[int, float]] = []

    def receive(self, payload: Payload) -> Future[bool]:
        self.arrivals.append((payload.round, time.monotonic()))
        done: Future[bool] = Future()
        done.set_result(True)
        return done


def test_a_slow_link_holds_each_hop_and_queues_the_next_behind_it():
    links = LinksSection(latency_s=0.1, bandwidth_bytes_s=4000.0)
    m = model(HeterogeneitySection(links=links), total=2)
    peer, reported = Recorder(), []
    link = LinkedHandle(peer, m, 0, 1, lambda p, target, s: reported.append((target, s)))
    tensors = {"w": torch.zeros(100)}  # 400 bytes: 0.1 s on the wire
    sent = time.monotonic()
    answers = [link.receive(Payload(0, r, 0, r, tensors)) for r in range(2)]
    assert not answers[0].done()  # the receiver has not seen it yet
    assert answers[1].result(2.0) is True and answers[0].result(0) is True
    (r0, t0), (r1, t1) = peer.arrivals
    assert (r0, r1) == (0, 1)
    assert 0.2 - 0.02 <= t0 - sent < 0.2 + 0.1  # 0.1 s latency + 0.1 s transfer
    assert 0.3 - 0.02 <= t1 - sent < 0.3 + 0.1  # queued behind the first transfer
    assert [target for target, _ in reported] == [1, 1]
    assert reported[0][1] == pytest.approx(0.2, abs=1e-3)  # as computed when it was sent
    assert 0.2 <= reported[1][1] <= 0.3 + 1e-3  # sent a moment later, due 0.1 s after the first


def test_a_wait_past_any_timer_leaves_the_link_scheduler_delivering():
    """A hop due in 1e10 s (past ``threading.TIMEOUT_MAX``) is waited for in bounded steps:
    the one scheduler thread of the process stays up for every other hop."""
    scheduler, peer = LinkScheduler(), Recorder()
    tensors = {"w": torch.zeros(1)}
    far = Deferred(lambda: peer.receive(Payload(0, 0, 0, 0, tensors)))
    scheduler.at(time.monotonic() + 1e10, far)
    time.sleep(0.1)  # the thread takes up the far hop's wait
    near = Deferred(lambda: peer.receive(Payload(0, 1, 0, 1, tensors)))
    scheduler.at(time.monotonic(), near)
    assert near.result(2.0) is True
    assert [r for r, _ in peer.arrivals] == [1] and not far.done()


def test_a_hop_whose_delivery_raises_is_the_senders_error_and_the_next_is_delivered():
    scheduler, peer = LinkScheduler(), Recorder()

    def broken() -> Future[bool]:
        raise ValueError("the receiver's handle is broken")

    failed = Deferred(broken)
    scheduler.at(time.monotonic(), failed)
    with pytest.raises(RuntimeError, match="could not deliver") as raised:
        failed.result(2.0)
    assert isinstance(raised.value.__cause__, ValueError)
    after = Deferred(lambda: peer.receive(Payload(0, 2, 0, 2, {"w": torch.zeros(1)})))
    scheduler.at(time.monotonic(), after)
    assert after.result(2.0) is True and [r for r, _ in peer.arrivals] == [2]


@pytest.mark.slow
def test_a_slow_client_sleeps_in_proportion_to_its_own_compute(tmp_path):
    run = ring(tmp_path, {"compute": {"factors": [1, 1, 3, 1]}})
    summary = run.run(timeout_s=60)
    assert summary["rounds_completed"] == 4
    delays = events(run, "compute_delay")
    assert {e["client"] for e in delays} == {2} and len(delays) == 4
    reports = run.coordinator.results.by_round
    for e in delays:
        metrics = reports[e["round"]][2]
        assert e["duration_s"] == pytest.approx(2 * metrics["train_s"])  # (3 - 1) x compute
        assert metrics["round_s"] >= metrics["train_s"] + e["duration_s"]
    assert all(reports[r][c]["compute_delay_s"] == 0 for r in reports for c in (0, 1, 3))


def record_hops(run) -> tuple[dict, dict]:
    """When each push left its sender (per target) and reached its receiver."""
    sent, arrived = {}, {}
    for client in run.clients.values():
        core = client.core

        def send(target, payload, core=core, send=core.outbox.send):
            sent[(core.id, target, payload.round)] = time.monotonic()
            send(target, payload)

        def receive(payload, core=core, receive=core.receive):
            arrived.setdefault((payload.sender, core.id, payload.round), time.monotonic())
            return receive(payload)

        core.outbox.send = send
        core.receive = receive
    return sent, arrived


@pytest.mark.slow
def test_a_slow_link_delays_exactly_the_hops_over_it(tmp_path):
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps({"links": [{"from": 1, "to": 2, "latency_s": 1.0}]}))
    run = ring(tmp_path, {"trace": str(trace)}, rounds=3)
    sent, arrived = record_hops(run)
    summary = run.run(timeout_s=120)
    assert summary["rounds_completed"] == 3 and summary["events"]["lost_payloads"] == 0
    delays = events(run, "link_delay")
    assert len(delays) == 3  # one push per round from 1 to 2, and nothing else
    assert all(e["client"] == 1 and "to 2," in e["detail"] for e in delays)
    assert all(e["duration_s"] >= 1.0 - 1e-6 for e in delays)
    assert len(sent) == 12 and set(arrived) == set(sent)
    took = {hop: arrived[hop] - sent[hop] for hop in sent}
    over = {hop: t for hop, t in took.items() if hop[:2] == (1, 2)}
    others = {hop: t for hop, t in took.items() if hop[:2] != (1, 2)}
    assert len(over) == 3 and all(t >= 1.0 - 0.01 for t in over.values()), over
    assert all(t < 0.5 for t in others.values()), others


@pytest.mark.slow
def test_an_offline_client_leaves_rejoins_and_keeps_what_it_held(tmp_path):
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps({"availability": {"2": [[0.5, 3.0]]}}))
    run = ring(  # the others train on until 6 s: the ring is still there when it comes back
        tmp_path,
        {"trace": str(trace)},
        rounds=10_000,
        experiment={"time_budget_s": 6.0},
        schedule={"mode": "async", "max_staleness": 1000},
    )
    core = run.clients[2].core
    algorithm = core.algorithm
    held = {}
    leave, come_back = run.coordinator.leave, run.coordinator.come_back

    def snapshot() -> dict[str, torch.Tensor]:
        return {k: v.clone() for k, v in core.algorithm.model.state_dict().items()}

    def leaving(client_id, round_, off_s):
        held["model"], held["completed"] = snapshot(), core.completed
        held["in_flight"] = len(core.outbox.in_flight)
        leave(client_id, round_, off_s)

    def coming_back(client_id, round_):
        back = snapshot()
        held["kept"] = all(torch.equal(v, back[k]) for k, v in held["model"].items())
        held["completed_back"] = core.completed
        return come_back(client_id, round_)

    away_if_due = core.availability.away_if_due

    def stopped_mid_round(round_):
        """Left mid-round: what it holds is what it has when its round stops, not at the
        leave (the round's step under way then still ends)."""
        if core.availability.departing():
            held["model"], held["completed"] = snapshot(), core.completed
        return away_if_due(round_)

    run.coordinator.leave, run.coordinator.come_back = leaving, coming_back
    core.availability.away_if_due = stopped_mid_round
    summary = run.run(timeout_s=120)
    offline = events(run, "offline")
    assert [e["client"] for e in offline] == [2]
    assert 0 < offline[0]["duration_s"] <= 2.5 + 1e-6  # from when it began to 3 s
    bypass = [e for e in events(run, "bypass") if e["client"] == 2]
    rejoin = [e for e in events(run, "rejoin") if e["client"] == 2]
    assert len(bypass) == 1 and len(rejoin) == 1
    assert rejoin[0]["time_s"] - offline[0]["time_s"] >= offline[0]["duration_s"] - 0.05
    assert "as a new client" not in rejoin[0]["detail"]  # back with its own state
    assert held["kept"] and held["completed_back"] == held["completed"]  # nothing trained away
    assert core.algorithm is algorithm  # never re-initialised from a hand-off
    assert not [e for e in run.coordinator.results.events if e["kind"].startswith("join")]
    assert summary["events"]["lost_payloads"] == 0  # what it had in flight was delivered
    assert 2 in summary["ring_order"] and core.completed > held["completed"]  # trained on


@pytest.mark.slow
def test_a_time_budget_ends_the_run_and_evaluates_at_wall_clock_marks(tmp_path):
    run = budgeted(tmp_path, {}, 4.0, eval={"every": 10_000, "every_s": 1.0})
    started = time.monotonic()
    run.run(timeout_s=60)
    assert time.monotonic() - started < 12.0
    completed = [c.core.completed for c in run.clients.values()]
    assert all(0 < n < 10_000 for n in completed)
    for client in range(4):
        times = sorted(r["time_s"] for r in run.coordinator.results.rows if r["client"] == client)
        assert len(times) >= 2  # the first rounds past the 1 s and 2 s marks at least
        assert times[-1] >= 2.0


@pytest.mark.slow
def test_a_wall_time_wait_bound_unpaces_the_ring_from_its_straggler(tmp_path):
    straggler = {"compute": {"factors": [40, 1, 1, 1]}}
    rounds = {}
    for wait in (None, 0.02):
        run = budgeted(tmp_path / str(wait), straggler, 3.0, schedule={"max_wait_s": wait})
        run.run(timeout_s=60)
        rounds[wait] = [run.clients[c].core.completed + 1 for c in range(4)]
    paced, free = rounds[None], rounds[0.02]
    # sync: a client d hops downstream of the straggler gets at most d rounds ahead of it
    assert max(paced[1:]) <= paced[0] + 3, paced
    assert min(free[1:]) > 2 * max(paced[1:]), (paced, free)  # bounded wait: the rest run on


@pytest.mark.slow
def test_drawn_off_periods_are_applied_on_the_run_clock_as_drawn(tmp_path):
    availability = {"mean_online_s": 0.5, "mean_offline_s": 0.5, "clients": [1]}
    run = budgeted(tmp_path, {"availability": availability}, 3.0, schedule={"mode": "async"})
    run.run(timeout_s=60)
    offline = events(run, "offline")
    assert offline and {e["client"] for e in offline} == {1}
    drawn = run.clients[1].core.hetero.offline_periods(1)
    expected = model(run.config.heterogeneity, total=4).offline_periods(1)
    assert [drawn[i] for i in range(5)] == [expected[i] for i in range(5)]
    started = list(itertools.takewhile(lambda p: p[0] < 3.0, expected))
    assert len(offline) <= len(started)  # one event at most per period begun in the budget
    assert all(e["duration_s"] <= max(end - start for start, end in started) for e in offline)
