"""What a lone client core is wired to in a test, without a ring: the coordinator's side of
its control link as a record, peers that acknowledge every push, and a push of its own
shared state as a peer would send it."""

from __future__ import annotations

from concurrent.futures import Future

import torch

from ring_actors.client.core import ClientCore
from ring_actors.client.method_factory import build_algorithm
from ring_actors.client.resources import ClientData
from ring_actors.config import config_from_dict
from ring_actors.delivery.payloads import Payload
from ring_actors.delivery.view import View
from tests.helpers.synthetic import separable

SHAPE = (1, 28, 28)


class Reports:
    """The coordinator's side of the control link, as a record of what a client told it."""

    def __init__(self) -> None:
        self.events: list[tuple[str, int, str]] = []
        self.unreachable: list[int] = []
        self.rounds: list[dict[str, float]] = []

    def report_event(self, kind, client_id, round_, detail="", **measured):
        self.events.append((kind, round_, detail))

    def report_unreachable(self, reporter, target, epoch):
        self.unreachable.append(target)

    def report_round(self, client_id, round_, metrics):
        self.rounds.append(metrics)

    def report_done(self, *args): ...

    def report_failed(self, *args): ...

    def rejoin(self, *args): ...


class Peer:
    """A peer that acknowledges everything it is sent."""

    def __init__(self) -> None:
        self.got: list[Payload] = []

    def receive(self, payload) -> Future:
        self.got.append(payload)
        future: Future = Future()
        future.set_result(True)
        return future


def share(client: ClientCore, sender: int, round_: int, **changes) -> Payload:
    tensors = {k: v.clone() for k, v in client.algorithm.shared_state().items()}
    fields = {"epoch": 1, "seq": round_, "tensors": tensors, "num_samples": 8} | changes
    return Payload(sender, round_, **fields)


def lone_client(algorithm="dfedavg", mode="sync", max_payload_bytes=2**31) -> ClientCore:
    """Client 0 of a ring of three, its peers acknowledging everything, on separable data."""
    config = config_from_dict(
        {
            "clients": {"count": 3},
            "algorithm": {"name": algorithm},
            "schedule": {
                "mode": mode,
                "hop_timeout_s": 2,
                "max_payload_bytes": max_payload_bytes,
            },
        }
    )
    data = separable(32, 4, SHAPE)
    method = build_algorithm(config, 0, 4, SHAPE, torch.device("cpu"))
    client = ClientCore(0, config, method, ClientData(data, data, data), Reports())
    client.set_view(View(1, (0, 1, 2), (0, 0, 0)), {1: Peer(), 2: Peer()})
    return client
