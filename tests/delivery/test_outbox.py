"""The outbox's bookkeeping under a view change that lands in the middle of a poll."""

from __future__ import annotations

import torch

from ring_actors.config import config_from_dict
from ring_actors.delivery.outbox import NotKept, Outbox
from ring_actors.delivery.payloads import Payload
from ring_actors.delivery.transport import PeerGone
from ring_actors.timeouts import Timeouts


class Rerouted:
    """A send's answer that says the target died; asking whether it is done lets a new
    view re-route the send first, as the actor thread that takes views can at that moment."""

    def __init__(self) -> None:
        self.outbox: Outbox | None = None
        self.taken: list = []

    def done(self) -> bool:
        self.taken.extend(self.outbox.reroute(members=set()))  # the target left the ring
        return True

    def result(self, timeout=None) -> bool:
        raise PeerGone("target 1")


class Target:
    def __init__(self, answer) -> None:
        self.answer = answer

    def receive(self, payload):
        return self.answer


def test_a_send_re_routed_during_a_poll_is_not_touched_nor_reported_by_it():
    reported: list[int] = []
    answer = Rerouted()
    timeouts = Timeouts.from_schedule(config_from_dict({}).schedule)
    outbox = Outbox(timeouts, reported.append, print)
    answer.outbox = outbox
    outbox.set_handles({1: Target(answer)})
    outbox.send(1, Payload(0, 0, 1, 0, {"w": torch.ones(2)}))
    outbox.poll()
    (flight,) = answer.taken
    assert flight.gone_at is None and not flight.reported  # re-routed: no longer the poll's
    assert reported == []  # 1 left the ring: nothing to report about it
    assert outbox.in_flight == []


class Refusing:
    """A live receiver whose disk is full: every send is answered at once, not kept."""

    def __init__(self) -> None:
        self.sends = 0

    def receive(self, payload):
        self.sends += 1
        return Rejected()


class Rejected:
    def done(self) -> bool:
        return True

    def result(self, timeout=None) -> bool:
        raise NotKept("client 1 could not save it: [Errno 28] No space left on device")


def test_a_send_never_kept_is_sent_again_then_given_up_lost_without_suspecting_its_target():
    reported: list[int] = []
    events: list[tuple] = []
    schedule = config_from_dict({"schedule": {"hop_timeout_s": 0.4}}).schedule
    outbox = Outbox(
        Timeouts.from_schedule(schedule),
        reported.append,
        lambda *event: events.append(event),
    )
    target = Refusing()
    outbox.set_handles({1: target})
    outbox.send(1, Payload(0, 3, 1, 3, {"w": torch.ones(2)}))
    assert outbox.drain(timeout_s=5.0) == 1  # given up after the hop timeout: lost
    assert target.sends >= 2 and outbox.hops == 0 and outbox.in_flight == []
    assert reported == []  # it answered: no reason to have the coordinator probe it
    ((kind, round_, detail),) = events
    assert (kind, round_) == ("payload_not_kept", 3) and "share round 3 to 1" in detail
    assert outbox.unacknowledged() == [detail]  # the loss event at the end names it too
