"""The real client and coordinator cores as a ring in one process: rounds, laps, crashes,
hangs, joins, a method that raises and non-finite training, each in well under a second."""

from __future__ import annotations

import pytest
import torch

from ring_actors.algorithms import ALGORITHMS
from ring_actors.delivery.payloads import Channel, Payload
from ring_actors.in_process import LocalHandle
from tests.helpers.in_process_ring import client_data, ring


def test_a_push_ring_trains_every_round_and_loses_nothing(tmp_path):
    summary = ring(tmp_path).run(timeout_s=60)
    assert summary["rounds_completed"] == 3
    assert summary["events"]["lost_payloads"] == 0
    assert summary["hops"] == 4 * 3  # one push per client and round, each acknowledged
    assert summary["local_acc"]["mean"] > 0.5  # four separable classes: chance is 0.25


def test_run_returns_only_once_nothing_writes_into_the_folder(tmp_path):
    # A caller may delete the folder as soon as ``run`` returns (a benchmark's temporary
    # folder): the coordinator's loop must have stopped writing its tables by then.
    run = ring(tmp_path)
    run.run(timeout_s=60)
    assert not run.loop.is_alive()


def test_a_lap_ring_averages_exactly(tmp_path):
    run = ring(tmp_path, algorithm="fedavg")
    run.run(timeout_s=60)
    models = [c.core.algorithm.shared_state() for c in run.clients.values()]
    for name, tensor in models[0].items():
        for other in models[1:]:
            assert torch.allclose(tensor, other[name]), name  # everyone applied one total


def test_the_last_rounds_are_evaluated_with_the_method_s_diagnostics(tmp_path):
    run = ring(tmp_path, "drdfl", count=2, rounds=4, evaluation={"every": 10, "last_rounds": 2})
    run.run(timeout_s=60)
    rows = run.coordinator.results.rows
    assert sorted({r["round"] for r in rows}) == [2, 3]  # never every 10th; the last two
    measured = run.clients[0].core.algorithm.diagnostics(client_data(2)[0].local_test)
    assert measured and all(f"diag_{key}" in row for row in rows for key in measured)


def test_a_crashed_client_is_bypassed_and_the_ring_finishes(tmp_path):
    run = ring(tmp_path, faults=[{"at_round": 1, "crash": [2]}])
    summary = run.run(timeout_s=60)
    assert summary["events"]["crashes"] == 1 and summary["events"]["bypasses"] == 1
    assert summary["ring_order"] == [0, 1, 3]
    assert summary["rounds_completed"] == 3
    assert summary["events"]["lost_payloads"] == 0


def test_a_frozen_client_is_bypassed_as_hung(tmp_path):
    run = ring(tmp_path, rounds=4, faults=[{"at_round": 1, "hang": [1], "for_s": 3.0}])
    summary = run.run(timeout_s=60)
    assert summary["events"]["hangs"] >= 1
    assert summary["rounds_completed"] == 4


def test_a_lap_survives_a_crash_mid_run(tmp_path):
    run = ring(tmp_path, algorithm="fedavg", rounds=4, faults=[{"at_round": 2, "crash": [1]}])
    summary = run.run(timeout_s=60)
    assert summary["rounds_completed"] == 4 and summary["ring_order"] == [0, 2, 3]
    survivors = [run.clients[c].core.algorithm.shared_state() for c in (0, 2, 3)]
    for name, tensor in survivors[0].items():
        assert all(torch.allclose(tensor, s[name]) for s in survivors[1:]), name


def test_a_joiner_is_spliced_in_and_initialised(tmp_path):
    run = ring(tmp_path, rounds=5, reserve=1)
    run.start()
    run.join(1, first_round=2)
    run.wait(timeout_s=60)
    run.close()
    kinds = [e["kind"] for e in run.coordinator.events]
    assert "join" in kinds and "join_initialised" in kinds
    assert run.clients[4].core.completed == 4


def test_a_joiner_starts_from_its_donor_s_state_of_the_round_before_its_first(tmp_path):
    run = ring(tmp_path, algorithm="fedavg", rounds=5, reserve=1)
    run.start()
    run.join(1, first_round=3)  # asked before anyone ended a round
    run.wait(timeout_s=60)
    run.close()
    (event,) = [e for e in run.coordinator.events if e["kind"] == "join_initialised"]
    assert event["round"] == 2


def test_a_joiner_whose_donor_leaves_first_goes_on_without_a_hand_off(tmp_path):
    run = ring(tmp_path, algorithm="fedavg", rounds=6, reserve=1)
    run.start()
    (joiner,) = run.join(1, first_round=4)
    run.kill(run.coordinator.table.donor_for(joiner))  # before it ends round 3
    run.wait(timeout_s=60)
    run.close()
    (event,) = [e for e in run.coordinator.events if e["kind"] == "join_without_hand_off"]
    assert "left the ring" in event["detail"]
    assert run.clients[joiner].core.completed == 5


def test_a_joiner_told_to_start_fresh_is_handed_nothing(tmp_path):
    run = ring(tmp_path, rounds=5, reserve=1, join_start="fresh")
    run.start()
    run.join(1, first_round=2)
    run.wait(timeout_s=60)
    run.close()
    kinds = [e["kind"] for e in run.coordinator.events]
    assert "join_fresh" in kinds and "join_initialised" not in kinds
    assert not run.clients[4].core.inbox.peek(lambda p: p.channel == Channel.INIT)
    assert run.clients[4].core.completed == 4


@pytest.mark.parametrize("policy", ["drop", "stop"])
def test_a_method_that_raises_follows_the_error_policy(tmp_path, policy):
    run = ring(tmp_path, faults=[{"at_round": 1, "error": [1]}], on_client_error=policy)
    summary = run.run(timeout_s=30)
    (error,) = run.coordinator.errors
    assert error["client"] == 1 and "InjectedError" in error["error"]  # the traceback
    if policy == "drop":
        assert summary["stopped"] is None and summary["ring_order"] == [0, 2, 3]
        assert summary["rounds_completed"] == 3
    else:
        assert "client 1 failed in round 1" in summary["stopped"]


def test_when_every_client_fails_the_run_stops_with_the_reason(tmp_path):
    run = ring(tmp_path, count=3, faults=[{"at_round": 1, "error": [0, 1, 2]}])
    summary = run.run(timeout_s=30)
    assert "no client can go on" in summary["stopped"]


def test_non_finite_training_is_an_error_and_laps_still_complete(tmp_path):
    run = ring(tmp_path, algorithm="fedavg", rounds=3)
    poisoned = run.clients[2].core.algorithm
    honest_train = poisoned.train_round

    def train_then_poison(data):
        metrics = honest_train(data)
        with torch.no_grad():
            next(iter(poisoned.model.parameters())).fill_(float("nan"))
        return metrics

    poisoned.train_round = train_then_poison
    summary = run.run(timeout_s=30)
    kinds = [e["kind"] for e in run.coordinator.events]
    assert "non_finite_contribution" in kinds and "client_error" in kinds
    assert summary["ring_order"] == [0, 1, 3] and summary["rounds_completed"] == 3
    for client in (0, 1, 3):  # the others' laps completed without the poisoned model
        state = run.clients[client].core.algorithm.shared_state()
        assert all(bool(torch.isfinite(v).all()) for v in state.values())


def test_a_client_stuck_in_its_method_is_bypassed_while_it_answers_pings(tmp_path):
    run = ring(tmp_path, rounds=3, stall_hops=2)
    stuck = run.clients[3].core.algorithm
    honest_train = stuck.train_round
    release = __import__("threading").Event()

    def train_forever(data):
        release.wait(30)
        return honest_train(data)

    stuck.train_round = train_forever
    summary = run.run(timeout_s=30)
    release.set()
    hang = [e for e in run.coordinator.events if e["kind"] == "hang"]
    assert hang and "no round finished" in hang[0]["detail"]
    assert summary["ring_order"] == [0, 1, 2]


def test_every_method_runs_a_ring_in_process(tmp_path):
    for name in sorted(ALGORITHMS):
        run = ring(tmp_path / name, algorithm=name, count=3, rounds=2, hop_timeout_s=3.0)
        summary = run.run(timeout_s=60)
        assert summary["rounds_completed"] == 2, name
        assert summary["events"]["lost_payloads"] == 0, name


@pytest.mark.slow
def test_per_round_state_stays_bounded_over_a_long_run(tmp_path):
    run = ring(tmp_path, algorithm="fedavg", count=3, rounds=30)
    summary = run.run(timeout_s=120)
    assert summary["rounds_completed"] == 30
    for client in run.clients.values():
        core = client.core
        # A few rounds, plus those a checkpoint may lag (a resume redoes them from peers).
        kept = core.config.checkpoint.rounds_kept
        assert len(core.inbox._seen) <= kept(4) * 3 * 2  # tokens and pushes
        assert len(core.laps.results) <= kept(4)
        assert not core.outbox.in_flight
        assert len(core.published.by_round) <= kept(3)
    assert len(run.coordinator.health.probes) <= 3


@pytest.mark.parametrize("name", ["fedrep", "fedbn", "fednova", "dfedpgp", "dispfl"])
def test_each_baseline_learns_on_a_ring(tmp_path, name):
    summary = ring(tmp_path, algorithm=name, count=3, rounds=3, hop_timeout_s=3.0).run(60)
    assert summary["rounds_completed"] == 3 and summary["events"]["lost_payloads"] == 0
    assert summary["local_acc"]["mean"] > 0.5, summary["local_acc"]  # chance is 0.25


def test_a_payload_delivered_in_process_is_the_receivers_own_copy(tmp_path):
    """A member adds its contribution into a received token in place; sharing the sender's
    tensors, a re-route of the sender's unacknowledged copy would carry that contribution
    twice. Between processes the wire copies; in one process the handle must."""
    run = ring(tmp_path, algorithm="dfedavg", count=2)
    state = {k: v.clone() for k, v in run.clients[0].core.algorithm.shared_state().items()}
    sent = Payload(0, 0, 0, 0, state, num_samples=48, channel=Channel.SHARE)
    assert LocalHandle(run.clients[1]).receive(sent).result(timeout=10)
    (queued,) = run.clients[1].core.inbox.pop(lambda p: p.sender == 0)
    key = next(k for k, v in state.items() if v.is_floating_point())
    before = state[key].clone()
    queued.tensors[key].add_(1.0)
    assert torch.equal(sent.tensors[key], before)
