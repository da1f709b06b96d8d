"""A checkpointing client writes to its spool only the pushes a later round of its own may
merge: in sync mode the final round's pushes are merged by no round, so a restart never
needs them; in async mode any round takes any push, the final round's included."""

from __future__ import annotations

import torch

from ring_actors.client.core import ClientCore
from ring_actors.client.method_factory import build_algorithm
from ring_actors.client.resources import ClientData
from ring_actors.config import config_from_dict
from ring_actors.delivery.view import View
from tests.helpers.client_links import SHAPE, Peer, Reports, share
from tests.helpers.synthetic import separable

ROUNDS = 3


def checkpointing_core(tmp_path, mode: str) -> ClientCore:
    config = config_from_dict(
        {
            "experiment": {"rounds": ROUNDS},
            "clients": {"count": 3},
            "schedule": {"hop_timeout_s": 2, "mode": mode},
        }
    )
    data = separable(32, 4, SHAPE)
    method = build_algorithm(config, 0, 4, SHAPE, torch.device("cpu"))
    path = tmp_path / "client-0.pt"
    client = ClientCore(
        0, config, method, ClientData(data, data, data), Reports(), checkpoint_path=path
    )
    client.set_view(View(1, (0, 1, 2), (0, 0, 0)), {1: Peer(), 2: Peer()})
    return client


def spooled_rounds(client: ClientCore) -> list[int]:
    return sorted(p.round for p in client.kept.spool.load(torch.device("cpu")))


def test_a_sync_push_of_the_final_round_is_queued_but_not_written_to_the_spool(tmp_path):
    client = checkpointing_core(tmp_path, "sync")
    for round_ in range(ROUNDS):
        assert client.receive(share(client, 2, round_))
    assert spooled_rounds(client) == list(range(ROUNDS - 1))
    queued = client.inbox.peek(lambda p: True)
    assert sorted(p.round for p in queued) == list(range(ROUNDS))


def test_an_async_push_of_the_final_round_is_spooled_a_slower_round_may_merge_it(tmp_path):
    client = checkpointing_core(tmp_path, "async")
    for round_ in range(ROUNDS):
        assert client.receive(share(client, 2, round_))
    assert spooled_rounds(client) == list(range(ROUNDS))
