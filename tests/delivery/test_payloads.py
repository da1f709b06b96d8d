"""Payload size accounting, validation and copying."""

from __future__ import annotations

import math

import pytest
import torch

from ring_actors.delivery.payloads import (
    Channel,
    LapHeader,
    Payload,
    PayloadError,
    cpu_snapshots,
    detach_to_cpu,
)
from tests.helpers.torch_calls import TensorsMade


def make(tensors=None, **fields) -> Payload:
    if tensors is None:
        tensors = {"w": torch.ones(3, 4), "b": torch.zeros(5, dtype=torch.float64)}
    values = {"sender": 1, "round": 2, "epoch": 3, "seq": 4, "num_samples": 10} | fields
    return Payload(tensors=tensors, **values)


def test_nbytes_sums_numel_times_element_size():
    tensors = {
        "f32": torch.zeros(3, 4),
        "f16": torch.zeros(7, dtype=torch.float16),
        "i64": torch.zeros(2, 2, dtype=torch.int64),
        "u8": torch.zeros(5, dtype=torch.uint8),
    }
    assert make(tensors).nbytes == 12 * 4 + 7 * 2 + 4 * 8 + 5 * 1


def test_key_identifies_a_delivery():
    assert make().key == (1, 2, 4, "share", "")
    assert make(channel=Channel.INIT).key == (1, 2, 4, "init", "")
    lap = LapHeader("avg", leader=0, attempt=4, epoch=3)
    # A lap token names its leader and epoch: each new leader counts attempts from 0.
    assert make(channel=Channel.LAP, lap=lap).key == (1, 2, 4, "lap", "avg@0/3")


def test_validate_accepts_a_good_payload():
    make().validate()
    make({"n": torch.tensor([1, 2, 3])}, round=0, num_samples=0).validate()


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_validate_rejects_non_finite(bad):
    tensors = {"ok": torch.ones(2), "w": torch.tensor([0.0, bad])}
    with pytest.raises(PayloadError, match="'w'.*non-finite"):
        make(tensors).validate()


def test_validate_rejects_non_finite_half_precision():
    with pytest.raises(PayloadError, match="non-finite"):
        make({"w": torch.tensor([math.inf], dtype=torch.float16)}).validate()


def test_validate_rejects_empty_tensors_where_state_is_expected():
    with pytest.raises(PayloadError, match="non-empty"):
        make({}).validate({"w": (1,)})
    make({}).validate()  # a lap token nobody has added to yet is well-formed


def test_validate_rejects_non_tensor_values():
    with pytest.raises(PayloadError, match="'w' is not a tensor"):
        make({"ok": torch.ones(1), "w": [1.0, 2.0]}).validate()


def test_validate_rejects_negative_round_and_sample_count():
    with pytest.raises(PayloadError, match="negative"):
        make(round=-1).validate()
    with pytest.raises(PayloadError, match="negative"):
        make(num_samples=-5).validate()


def test_to_device_keeps_every_field():
    lap = LapHeader("avg", leader=0, attempt=1, epoch=3, visited=(0, 1), contributors=(0,))
    source = make(channel=Channel.LAP, lap=lap)
    moved = source.to(torch.device("cpu"))
    assert moved is not source
    for name in ("sender", "round", "epoch", "seq", "num_samples", "channel", "lap"):
        assert getattr(moved, name) == getattr(source, name), name
    assert set(moved.tensors) == set(source.tensors)
    for name, tensor in source.tensors.items():
        assert moved.tensors[name].device.type == "cpu"
        assert moved.tensors[name].dtype == tensor.dtype
        assert torch.equal(moved.tensors[name], tensor)


def test_detach_to_cpu_returns_copies_that_do_not_alias():
    weight = torch.nn.Parameter(torch.arange(6.0).view(2, 3))
    buffer = torch.tensor([1, 2, 3])
    copies = detach_to_cpu({"w": weight, "n": buffer})
    assert not copies["w"].requires_grad
    assert copies["w"].data_ptr() != weight.data_ptr()
    with torch.no_grad():
        weight.add_(100.0)
    buffer.zero_()
    assert torch.equal(copies["w"], torch.arange(6.0).view(2, 3))
    assert torch.equal(copies["n"], torch.tensor([1, 2, 3]))


def test_detach_to_cpu_of_a_state_dict_survives_training_steps():
    model = torch.nn.Linear(3, 2)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    copies = detach_to_cpu(model.state_dict())
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(-3.0).add_(1.0)
    for name, value in copies.items():
        assert torch.equal(value, before[name])
        assert not torch.equal(value, model.state_dict()[name])


def test_validate_rejects_tensors_the_receiver_cannot_merge():
    payload = Payload(0, 0, 0, 0, {"a": torch.zeros(2, 3), "b": torch.zeros(4)})
    payload.validate({"a": (2, 3), "b": (4,)})
    with pytest.raises(PayloadError, match="do not match"):
        payload.validate({"a": (2, 3)})
    with pytest.raises(PayloadError, match="'b'"):
        payload.validate({"a": (2, 3), "b": (5,)})


def test_finiteness_is_checked_without_a_mask_as_large_as_the_tensor():
    """``isfinite`` writes one flag per value and reads them again: many times the cost of
    one read of the values, which is all the check needs."""
    payload = make({"w": torch.ones(1000), "h": torch.ones(1000, dtype=torch.float16)})
    with TensorsMade() as mode:
        payload.validate()
    assert max((t.numel() for t in mode.made), default=0) <= 2


def test_values_whose_sum_overflows_their_type_are_finite():
    tensors = {"h": torch.full((70000,), 1.0, dtype=torch.float16)}  # sums past 65504
    tensors["w"] = torch.tensor([3e38, 3e38])  # sums past float32's largest
    make(tensors).validate()


def test_snapshots_copy_a_tensor_the_states_share_once_and_alias_none_of_them():
    weight, bias = torch.arange(6.0), torch.ones(2)
    shared, hand_off = cpu_snapshots({"w": weight, "b": bias}, {"w": weight, "x": bias * 2})
    assert shared["w"] is hand_off["w"]
    assert shared["w"].data_ptr() != weight.data_ptr()
    weight.add_(100.0)
    assert torch.equal(hand_off["w"], torch.arange(6.0))
    assert torch.equal(shared["b"], torch.ones(2)) and torch.equal(
        hand_off["x"], torch.full((2,), 2.0)
    )
