"""A lap's arithmetic: contributions added into the total where it lies, all or nothing,
and a checksum of the total that copies nothing and does not overflow unnoticed."""

from __future__ import annotations

import pytest
import torch

from ring_actors.client.lap_arithmetic import accumulate, lap_checksum
from ring_actors.models import build_backbone
from tests.helpers.torch_calls import TensorsMade


def test_a_contribution_is_added_into_the_tensors_the_total_holds():
    held = torch.arange(4.0)
    total = {"w": held}
    accumulate(total, {"w": torch.ones(4)})
    assert total["w"] is held
    assert torch.equal(held, torch.arange(4.0) + 1)


def test_a_key_the_total_lacks_is_inserted_as_a_copy():
    mine = torch.ones(3)
    total: dict[str, torch.Tensor] = {}
    accumulate(total, {"w": mine})
    accumulate(total, {"w": mine})
    assert torch.equal(total["w"], torch.full((3,), 2.0))
    assert torch.equal(mine, torch.ones(3))  # the contribution itself is never added to


def test_a_contribution_that_does_not_fit_leaves_the_total_as_it_was():
    total = {"a": torch.zeros(2), "b": torch.zeros(3)}
    with pytest.raises(ValueError, match="'b'"):
        accumulate(total, {"a": torch.ones(2), "b": torch.ones(4)})
    assert torch.equal(total["a"], torch.zeros(2)) and torch.equal(total["b"], torch.zeros(3))


def test_a_total_whose_elements_share_memory_is_added_to_as_a_new_tensor():
    """An expanded tensor holds one value for many elements: adding into it in place would
    add every element's share into that one value."""
    total = {"w": torch.zeros(1).expand(3)}
    accumulate(total, {"w": torch.arange(3.0)})
    assert torch.equal(total["w"], torch.arange(3.0))


def test_the_checksum_makes_no_float64_copy_of_the_total():
    total = {"w": torch.ones(1000), "h": torch.ones(1000, dtype=torch.float16)}
    with TensorsMade() as mode:
        assert lap_checksum(total) == 2000.0
    assert [t for t in mode.made if t.dtype == torch.float64 and t.numel() > 1] == []


@pytest.mark.parametrize(
    ("tensor", "expected"),
    [
        (torch.tensor([3e38, 3e38]), 6e38),  # past float32's largest
        (torch.full((70000,), 1.0, dtype=torch.float16), 70000.0),  # past float16's
        (torch.tensor([2**62, 2**62], dtype=torch.int64), 2.0**63),  # past int64's
        (torch.tensor([True, True, False]), 2.0),
    ],
)
def test_a_checksum_past_its_types_range_is_summed_exactly_not_wrapped(tensor, expected):
    assert lap_checksum({"x": tensor}) == pytest.approx(expected, rel=1e-6)


def test_a_models_total_checksum_is_the_sum_of_its_contributions_checksums():
    """What the soak's lap audit relies on: a total's checksum is the sum of its members'
    within 1e-4 of the larger of 1 and the total's (FedAvg's weighted states, 8 members)."""
    contributions = []
    for seed in range(8):
        torch.manual_seed(seed)
        state = build_backbone("cnn", (3, 32, 32), 10).state_dict()
        contributions.append({k: v * 32.0 for k, v in state.items() if v.is_floating_point()})
    total: dict[str, torch.Tensor] = {}
    for contribution in contributions:
        accumulate(total, contribution)
    parts = sum(lap_checksum(c) for c in contributions)
    checksum = lap_checksum(total)
    assert abs(parts - checksum) <= 1e-4 * max(1.0, abs(checksum))
