"""A joiner's hand-off is the donor's state at the end of the round before the joiner's
first, however early or late the coordinator's request reaches the donor: a run with a join
ends the same way each time it runs (or is resumed)."""

from __future__ import annotations

import torch

from ring_actors.client.core import ClientCore
from ring_actors.client.method_factory import build_algorithm
from ring_actors.client.resources import ClientData
from ring_actors.config import config_from_dict
from ring_actors.delivery.payloads import Channel, Payload
from ring_actors.delivery.view import View
from ring_actors.delivery.wire import from_wire
from tests.helpers.client_links import SHAPE, Peer, Reports
from tests.helpers.synthetic import separable


def alone(tmp_path) -> ClientCore:
    """Client 0 of two, the only member left, checkpointing each round into ``tmp_path``."""
    config = config_from_dict(
        {
            "clients": {"count": 2},
            "algorithm": {"name": "dfedavg"},
            "schedule": {"hop_timeout_s": 2},
            "checkpoint": {"every_rounds": 1},
        }
    )
    data = separable(32, 4, SHAPE)
    method = build_algorithm(config, 0, 4, SHAPE, torch.device("cpu"))
    client = ClientCore(
        0, config, method, ClientData(data, data, data), Reports(),
        checkpoint_path=tmp_path / "client-0.pt",
    )  # fmt: skip
    client.set_view(View(1, (0,), (0,)), {})
    return client


def handed(joiner: Peer) -> list[Payload]:
    return [p if isinstance(p, Payload) else from_wire(p) for p in joiner.got]


def same(tensors: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> bool:
    return tensors.keys() == expected.keys() and all(
        torch.equal(tensors[k], v.cpu()) for k, v in expected.items()
    )


def test_a_donor_asked_early_hands_the_state_of_the_round_asked_once_it_ends(tmp_path):
    donor, joiner = alone(tmp_path), Peer()
    donor.hand_off(3, joiner, 1)  # the joiner's first round is 2
    assert donor.run_round(0) and not joiner.got  # round 1 has not ended
    assert donor.run_round(1)
    (payload,) = handed(joiner)
    assert payload.channel == Channel.INIT and payload.round == 1
    assert same(payload.tensors, donor.algorithm.hand_off_state())
    assert donor.run_round(2) and len(joiner.got) == 1  # handed once


def test_a_restarted_donor_hands_the_state_it_resumed(tmp_path):
    before = alone(tmp_path)
    for round_ in range(2):
        assert before.run_round(round_)
    restarted, joiner = alone(tmp_path), Peer()
    assert restarted.load_checkpoint() == 1
    restarted.hand_off(3, joiner, 1)
    (payload,) = handed(joiner)
    assert payload.round == 1
    assert same(payload.tensors, before.algorithm.hand_off_state())
