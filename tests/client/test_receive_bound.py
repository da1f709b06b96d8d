"""A client refuses a payload over its bound by the sizes its wire form declares, before
any of its bytes is copied into tensors."""

from __future__ import annotations

import torch

from ring_actors.delivery.event_kinds import EventKind
from ring_actors.delivery.payloads import Payload
from ring_actors.delivery.wire import to_wire
from tests.helpers.client_links import lone_client

LIMIT = 2**20


def test_a_wire_payload_over_the_bound_is_refused_for_its_size_before_it_is_copied():
    client = lone_client(max_payload_bytes=LIMIT)
    values = torch.zeros(LIMIT // 2)  # float32: twice the bound
    values[-1] = float("nan")  # found only by copying the bytes in
    sent = Payload(1, 1, 1, 1, {"w": values}, num_samples=8)
    assert not client.receive(to_wire(sent))
    reasons = [d for kind, _, d in client.control.events if kind == EventKind.PAYLOAD_REJECTED]
    assert len(reasons) == 1
    assert f"exceed the limit of {LIMIT}" in reasons[0], reasons
    assert len(client.inbox) == 0
