"""The outbox's bookkeeping under a view change that lands in the middle of a poll."""

from __future__ import annotations

import torch

from ring_actors.config import config_from_dict
from ring_actors.delivery.outbox import Outbox
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
    outbox = Outbox(timeouts, reported.append, lambda target, error: None)
    answer.outbox = outbox
    outbox.set_handles({1: Target(answer)})
    outbox.send(1, Payload(0, 0, 1, 0, {"w": torch.ones(2)}))
    outbox.poll()
    (flight,) = answer.taken
    assert flight.gone_at is None and not flight.reported  # re-routed: no longer the poll's
    assert reported == []  # 1 left the ring: nothing to report about it
    assert outbox.in_flight == []
