"""A client refuses a payload over its bound by the sizes its wire form declares, before
any of its bytes is copied into tensors."""

from __future__ import annotations

import torch

from ring_actors.client.core import ClientCore
from ring_actors.client.method_factory import build_algorithm
from ring_actors.client.resources import ClientData
from ring_actors.config import config_from_dict
from ring_actors.delivery.event_kinds import EventKind
from ring_actors.delivery.payloads import Payload
from ring_actors.delivery.view import View
from ring_actors.delivery.wire import to_wire
from tests.helpers.client_links import SHAPE, Peer, Reports
from tests.helpers.synthetic import separable

LIMIT = 2**20


def bounded_client() -> ClientCore:
    config = config_from_dict(
        {
            "clients": {"count": 3},
            "schedule": {"hop_timeout_s": 2, "max_payload_bytes": LIMIT},
        }
    )
    data = separable(32, 4, SHAPE)
    method = build_algorithm(config, 0, 4, SHAPE, torch.device("cpu"))
    client = ClientCore(0, config, method, ClientData(data, data, data), Reports())
    client.set_view(View(1, (0, 1, 2), (0, 0, 0)), {1: Peer(), 2: Peer()})
    return client


def test_a_wire_payload_over_the_bound_is_refused_for_its_size_before_it_is_copied():
    client = bounded_client()
    values = torch.zeros(LIMIT // 2)  # float32: twice the bound
    values[-1] = float("nan")  # found only by copying the bytes in
    sent = Payload(1, 1, 1, 1, {"w": values}, num_samples=8)
    assert not client.receive(to_wire(sent))
    reasons = [d for kind, _, d in client.control.events if kind == EventKind.PAYLOAD_REJECTED]
    assert len(reasons) == 1
    assert f"exceed the limit of {LIMIT}" in reasons[0], reasons
    assert len(client.inbox) == 0
