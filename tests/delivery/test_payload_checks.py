"""What a hand-off must hold: the tensors the receiver knows, at its shapes and dtypes."""

from __future__ import annotations

import pytest
import torch

from ring_actors.delivery.payload_checks import check_known_tensors, check_tensors, specs
from ring_actors.delivery.payloads import Channel, Payload, PayloadError

MINE = specs({"body.weight": torch.zeros(4, 3), "#counts": torch.zeros(2)})


def init(**tensors: torch.Tensor) -> Payload:
    return Payload(1, 0, 0, -1, tensors, channel=Channel.INIT)


def test_a_hand_off_named_after_the_senders_state_is_taken():
    """GENE-FL names its learnGene after the sender's cluster: other names, same kinds."""
    check_known_tensors(init(**{"gene/c0/body.weight": torch.ones(4, 3)}), MINE)
    check_known_tensors(init(**{"body.weight": torch.ones(4, 3), "#extra": torch.ones(1)}), MINE)


@pytest.mark.parametrize(
    "wrong", [torch.ones(3, 4), torch.ones(4, 3, dtype=torch.float64), torch.ones(12)]
)
def test_a_known_tensor_of_another_shape_or_dtype_is_refused(wrong):
    with pytest.raises(PayloadError, match="body.weight"):
        check_known_tensors(init(**{"body.weight": wrong}), MINE)


def test_a_push_must_hold_exactly_the_receivers_names():
    push = Payload(1, 0, 0, 0, {"body.weight": torch.ones(4, 3)}, channel=Channel.SHARE)
    with pytest.raises(PayloadError, match="do not match"):
        check_tensors(push, MINE)
