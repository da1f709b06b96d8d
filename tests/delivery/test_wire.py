"""Payloads as bytes between processes: every tensor comes back equal, owned and writable,
the bytes pass Ray's serializer out of band, and bytes that do not fit are refused."""

from __future__ import annotations

import math
import pickle
from dataclasses import replace

import numpy as np
import pytest
import ray
import torch

from ring_actors.delivery.payloads import Channel, LapHeader, Payload, PayloadError
from ring_actors.delivery.wire import WireTensor, from_wire, to_wire
from tests.helpers.torch_calls import TensorsMade


def _payload() -> Payload:
    tensors = {
        "w": torch.randn(4, 3),
        "bf16": torch.randn(5).to(torch.bfloat16),
        "steps": torch.tensor(7, dtype=torch.int64),  # 0-dim
        "mask": torch.tensor([True, False, True]),
        "empty": torch.empty(0, 2),
        "strided": torch.arange(12.0).reshape(3, 4).t(),  # not contiguous
    }
    header = LapHeader("avg", leader=1, attempt=0, epoch=2, visited=(1,), contributors=(1,))
    return Payload(1, 3, 2, 0, tensors, num_samples=9, channel=Channel.LAP, lap=header)


def test_a_payload_comes_back_equal_with_tensors_it_owns():
    sent = _payload()
    wire = pickle.loads(pickle.dumps(to_wire(sent), protocol=5))
    got = from_wire(wire)
    assert (got.sender, got.round, got.epoch, got.seq) == (1, 3, 2, 0)
    assert (got.num_samples, got.channel, got.lap) == (9, Channel.LAP, sent.lap)
    assert got.tensors.keys() == sent.tensors.keys()
    for name, tensor in sent.tensors.items():
        assert got.tensors[name].dtype == tensor.dtype, name
        assert torch.equal(got.tensors[name], tensor), name
    got.tensors["w"].add_(1.0)  # writable, and not the sender's memory
    assert torch.equal(got.tensors["w"], sent.tensors["w"] + 1.0)


def test_the_bytes_travel_out_of_band_through_ray(ray_local):
    """Ray hands a NumPy array back as a read-only view of the object store: no copy on the
    way. The payload rebuilt from it owns its memory."""
    sent = _payload()
    wire = ray.get(ray.put(to_wire(sent)))
    data = wire.tensors["w"].data
    assert not data.flags.writeable and not data.flags.owndata
    got = from_wire(wire)
    assert got.tensors["w"].numpy().flags.writeable
    assert torch.equal(got.tensors["w"], sent.tensors["w"])


@pytest.mark.parametrize(
    "broken",
    [
        WireTensor("float32", (4, 3), np.zeros(47, np.uint8)),  # a byte short
        WireTensor("float32", (4, 3), np.zeros(12, np.float32)),  # not bytes
        WireTensor("Tensor", (1,), np.zeros(4, np.uint8)),  # a torch name, not a dtype
        WireTensor("float32", (-1,), np.zeros(4, np.uint8)),
        WireTensor("float32", [1], np.zeros(4, np.uint8)),
    ],
)
def test_bytes_that_do_not_fit_their_dtype_and_shape_are_refused(broken):
    wire = to_wire(_payload())
    wire = replace(wire, tensors={**wire.tensors, "w": broken})
    with pytest.raises(PayloadError, match="'w'"):
        from_wire(wire)


def test_a_wire_payload_around_something_else_is_refused():
    wire = replace(to_wire(_payload()), shell="not a payload")
    with pytest.raises(PayloadError, match="shell"):
        from_wire(wire)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_non_finite_values_are_refused_as_their_bytes_are_copied(bad, dtype):
    values = torch.zeros(3 * 2**18, dtype=dtype)  # several pieces of the copy
    values[-1] = bad
    sent = Payload(1, 3, 2, 0, {"ok": torch.ones(4, dtype=dtype), "w": values})
    with pytest.raises(PayloadError, match="'w'.*non-finite"):
        from_wire(to_wire(sent))


def test_a_payload_over_the_limit_is_refused_before_a_byte_is_copied():
    claimed = np.lib.stride_tricks.as_strided(np.zeros(1, np.uint8), (2**34,), (0,))  # 16 GiB
    wire = to_wire(_payload())
    wire = replace(wire, tensors={**wire.tensors, "w": WireTensor("float32", (2**32,), claimed)})
    with pytest.raises(PayloadError, match="exceed the limit of 1048576"):
        from_wire(wire, max_bytes=2**20)


def test_a_type_no_method_shares_is_refused_before_it_is_copied():
    wire = to_wire(_payload())
    odd = WireTensor("complex64", (2,), np.zeros(16, np.uint8))
    with pytest.raises(PayloadError, match="'w'.*complex64"):
        from_wire(replace(wire, tensors={**wire.tensors, "w": odd}))


def test_a_shell_that_is_not_well_formed_is_refused_before_its_tensors_are_copied():
    wire = to_wire(_payload())
    with pytest.raises(PayloadError, match="negative round"):
        from_wire(replace(wire, shell=replace(wire.shell, round=-1)))


def test_a_payload_from_the_wire_is_not_read_again_by_its_validation():
    got = from_wire(to_wire(_payload()))
    with TensorsMade() as mode:
        got.validate(None, 2**20)
    assert mode.made == []
    got.tensors["w"] = torch.tensor([math.nan])  # put in since: checked again
    with pytest.raises(PayloadError, match="'w'.*non-finite"):
        got.validate(None, 2**20)
