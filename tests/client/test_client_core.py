"""One client core without Ray: what it accepts, what it waits for, and what a bad payload
or a stale lap token can and cannot do to it."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future

import pytest
import torch

from ring_actors.client.core import ClientCore
from ring_actors.client.method_factory import build_algorithm
from ring_actors.client.resources import ClientData
from ring_actors.config import config_from_dict
from ring_actors.delivery.payloads import Channel, LapHeader, Payload
from ring_actors.delivery.transport import PeerUnavailable
from ring_actors.delivery.view import View
from tests.helpers.client_links import SHAPE, Peer, Reports, lone_client, share
from tests.helpers.synthetic import separable


def test_a_sync_round_waits_for_that_very_round_even_if_a_later_one_came_first():
    client = lone_client()
    assert client.receive(share(client, 2, 2))  # round 2 overtook round 1
    gathered: list = []
    thread = threading.Thread(target=lambda: gathered.extend(client.exchange.gather(2)))
    thread.start()
    thread.join(0.3)
    assert thread.is_alive()  # still waiting for round 1
    assert client.receive(share(client, 2, 1))
    thread.join(2)
    assert [(p.sender, p.round) for p in gathered] == [(2, 1)]


def test_a_round_reports_the_training_threads_cpu_time_beside_its_wall_time():
    client = lone_client(algorithm="local")
    client.set_view(View(2, (0,), (0,)), {})
    assert client.run_round(0)
    (metrics,) = client.control.rounds
    assert 0 < metrics["train_cpu_s"] <= metrics["train_s"] + 0.01


def test_a_round_reports_the_merge_of_what_it_took_as_part_of_its_training_cpu():
    client = lone_client("dfedavg")
    assert client.run_round(0)  # nothing to take in round 0
    assert client.receive(share(client, 2, 0))
    assert client.run_round(1)
    first, second = client.control.rounds
    assert 0 <= first["merge_cpu_s"] < first["train_cpu_s"]
    assert 0 < second["merge_cpu_s"] < second["train_cpu_s"]
    assert second["merged"] == 1


def test_a_round_publishes_one_copy_of_what_its_push_and_its_hand_off_share():
    client = lone_client("dfedavg")
    assert client.run_round(0)
    push, hand_off = client.published.last_push.tensors, client.published.hand_off
    assert set(push) == set(hand_off)
    assert all(push[name] is hand_off[name] for name in push)
    own = client.algorithm.shared_state()
    assert all(push[name].data_ptr() != own[name].data_ptr() for name in push)


def test_a_round_reports_the_process_cpu_used_since_the_previous_rounds_measures():
    client = lone_client(algorithm="local")
    client.set_view(View(2, (0,), (0,)), {})
    assert client.run_round(0)
    end = time.process_time() + 0.3  # work between rounds, such as a checkpoint, counts
    while time.process_time() < end:
        pass
    assert client.run_round(1)
    first, second = client.control.rounds
    assert first["process_cpu_s"] >= first["train_cpu_s"] > 0
    assert second["process_cpu_s"] >= 0.3 + second["train_cpu_s"]


@pytest.mark.parametrize(
    "changes, reason",
    [
        ({"round": 1.5}, "round must be an integer"),
        ({"seq": float("nan")}, "seq must be an integer"),
        ({"channel": "share"}, "unknown channel"),
        ({"lap": LapHeader("a", 0, 0, 1)}, "lap header belongs on lap channels"),
    ],
)
def test_malformed_headers_are_rejected_and_reported(changes, reason):
    client = lone_client()
    payload = share(client, 2, 1, **changes) if "round" not in changes else None
    if payload is None:
        payload = share(client, 2, 1)
        object.__setattr__(payload, "round", changes["round"])
    assert not client.receive(payload)
    assert reason in client.control.events[-1][2] and len(client.inbox) == 0


def test_unsupported_dtypes_and_oversized_payloads_are_rejected():
    client = lone_client(max_payload_bytes=1000)
    complex_state = {k: v.to(torch.complex64) for k, v in client.algorithm.shared_state().items()}
    assert not client.receive(share(client, 2, 1, tensors=complex_state))
    assert "unsupported type" in client.control.events[-1][2]
    assert not client.receive(share(client, 2, 1))  # the whole model is far above 1000 bytes
    assert "exceed the limit" in client.control.events[-1][2]


def test_a_payload_that_breaks_the_receiver_is_rejected_and_the_receiver_goes_on():
    client = lone_client(algorithm="fedavg")

    def broken(token, runs_round):
        raise RuntimeError("bug in a lap handler")

    client.laps.on_receive = broken
    token = Payload(2, 1, 1, 0, {}, channel=Channel.LAP, lap=LapHeader("avg", 2, 0, 1))
    assert not client.receive(token)
    assert "bug in a lap handler" in client.control.events[-1][2]
    del client.laps.on_receive  # the handler works again: the next token is taken as usual
    assert client.receive(token) and len(client.inbox) == 1


def test_a_lap_token_from_a_dead_epoch_is_dropped():
    client = lone_client(algorithm="fedavg")
    client.set_view(View(3, (0, 2), (0, 0)), {})
    token = Payload(2, 1, 1, 0, {}, channel=Channel.LAP, lap=LapHeader("avg", 2, 0, epoch=1))
    assert client.receive(token)
    assert ("lap_token_dropped", 1, "epoch 1") in client.control.events
    assert len(client.inbox) == 0 and not client.outbox.in_flight  # not passed on either


def test_a_lap_result_from_a_member_that_does_not_lead_the_lap_is_refused():
    client = lone_client(algorithm="fedavg")
    # Round 1's leader in view (0, 1, 2) is member 1; member 2 claims the result.
    total = {"w": torch.ones(2)}
    forged = LapHeader("avg", leader=2, attempt=0, epoch=1, visited=(2,), contributors=(2,))
    result = Payload(2, 1, 1, 0, total, channel=Channel.LAP_RESULT, lap=forged)
    assert client.receive(result)
    assert client.lap_result("avg", 1) is None
    honest = LapHeader("avg", leader=1, attempt=0, epoch=1, visited=(1,), contributors=(1, 2))
    client.receive(Payload(1, 1, 1, 0, total, channel=Channel.LAP_RESULT, lap=honest))
    assert client.lap_result("avg", 1).contributors == (1, 2)


class Restarting(Peer):
    """A peer whose first call finds it being restarted."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def receive(self, payload) -> Future:
        self.calls += 1
        if self.calls == 1:
            future: Future = Future()
            future.set_exception(PeerUnavailable("restarting"))
            return future
        return super().receive(payload)


def test_a_send_to_a_member_being_restarted_is_retried_without_reporting_it():
    client = lone_client()
    peer = Restarting()
    client.set_view(View(2, (0, 1, 2), (0, 0, 0)), {1: peer})
    client.outbox.retry_s = 0.0
    payload = share(client, 0, 0)
    client.outbox.send(1, payload)
    client.tick()  # unavailable: kept for another try
    client.tick()  # tried again, and taken
    client.tick()
    assert peer.got == [payload] and not client.outbox.in_flight
    assert client.control.unreachable == [] and client.outbox.hops == 1


def test_a_send_to_a_member_without_a_handle_waits_for_one():
    client = lone_client()
    payload = share(client, 0, 0)
    client.outbox.send(7, payload)  # no handle for 7 yet: kept, not raised
    late = Peer()
    client.set_view(View(2, (0, 1, 2, 7), (0, 0, 0, 0)), {7: late})
    client.outbox.retry_s = 0.0
    client.tick()
    assert late.got == [payload]


def test_views_are_ordered_by_epoch_so_a_stale_coordinator_cannot_roll_one_back():
    """A view of a later epoch is adopted whatever its number: only the coordinator sends
    views, and a restarted one numbers its epochs above every one it issued before
    (``test_coordinator_core``), so a higher epoch is the newer membership. What must never
    happen is a view of a lower epoch (a coordinator's reply that was overtaken) replacing it."""
    client = lone_client()
    client.set_view(View(9, (0, 2), (0, 0)), {})  # a restarted coordinator jumped ahead
    client.set_view(View(4, (0, 1, 2), (0, 0, 0)), {1: Peer()})  # an older incarnation's
    assert client.current_view.epoch == 9 and client.current_view.members == (0, 2)
    assert client.topology.out_neighbours(client.current_view.members, 0, 0) == [2]


def test_a_resumed_loop_waits_for_its_view_before_it_gathers():
    """The view's broadcast and the call that resumes a client may run in either order on
    the actor's threads; a loop that began without a view awaited no in-neighbour and
    merged nothing in its first round."""
    config = config_from_dict(
        {
            "experiment": {"rounds": 3},
            "clients": {"count": 3},
            "algorithm": {"name": "dfedavg"},
            "schedule": {"mode": "sync", "hop_timeout_s": 5},
        }
    )
    method = build_algorithm(config, 0, 4, SHAPE, torch.device("cpu"))
    data = separable(32, 4, SHAPE)
    client = ClientCore(0, config, method, ClientData(data, data, data), Reports())
    client.progress.completed = 1  # as restored from its checkpoint of round 1
    client.resume()  # round 2, before any view came
    time.sleep(0.3)
    client.set_view(View(1, (0, 1, 2), (0, 0, 0)), {1: Peer(), 2: Peer()})
    time.sleep(0.3)
    assert client.receive(share(client, 2, 1))  # the in-neighbour's push of round 1
    client.thread.join(10)
    (metrics,) = client.control.rounds
    assert metrics["merged"] == 1.0
