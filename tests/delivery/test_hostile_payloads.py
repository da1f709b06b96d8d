"""Property-based: whatever arrives, a client either takes it whole or rejects it (with an
event), never raises, and its model is untouched until it merges what it took."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ring_actors.client.core import ClientCore
from ring_actors.client.resources import ClientData
from ring_actors.config import config_from_dict
from ring_actors.coordinator.membership import View
from ring_actors.delivery.payloads import Channel, LapHeader, Payload
from ring_actors.method_factory import build_algorithm
from tests.algorithms.synthetic import separable
from tests.client.test_client_core import Peer, Reports

SHAPE = (1, 28, 28)
CONFIG = config_from_dict(
    {
        "clients": {"count": 3},
        "algorithm": {"name": "dfedavg"},
        "schedule": {"hop_timeout_s": 1, "max_payload_bytes": 2**24},
    }
)
DATA = separable(16, 4, SHAPE)


def fresh_client() -> ClientCore:
    method = build_algorithm(CONFIG, 0, 4, SHAPE, torch.device("cpu"))
    client = ClientCore(0, CONFIG, method, ClientData(DATA, DATA, DATA), Reports())
    client.set_view(View(2, (0, 1, 2), (0, 0, 0)), {1: Peer(), 2: Peer()})
    return client


CLIENT = fresh_client()
SHARED = {k: v.clone() for k, v in CLIENT.algorithm.shared_state().items()}

numbers = st.one_of(
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.none(),
    st.text(max_size=3),
    st.booleans(),
)
dtypes = st.sampled_from(
    [torch.float32, torch.float64, torch.float16, torch.int64, torch.uint8, torch.complex64]
)


@st.composite
def tensors(draw) -> dict:
    """The receiver's own keys and shapes (most of the time), values of any kind."""
    chosen = {}
    for name, value in SHARED.items():
        if draw(st.booleans()) and draw(st.booleans()):
            continue  # a key left out
        shape = value.shape if draw(st.integers(0, 4)) else (draw(st.integers(0, 5)),)
        dtype = draw(dtypes)
        fill = draw(st.floats(allow_nan=True, allow_infinity=True, width=32))
        tensor = torch.full(shape, 0.0).to(dtype)
        if tensor.is_floating_point() and tensor.numel():
            tensor.view(-1)[0] = fill
        chosen[name] = tensor
    if draw(st.booleans()):
        chosen[draw(st.text(max_size=5))] = draw(st.one_of(numbers, st.just(torch.ones(2))))
    if draw(st.integers(0, 9)) == 0:
        chosen["huge"] = torch.zeros(2**22)  # 16 MB: with the model, above the limit
    return chosen


@st.composite
def payloads(draw):
    channel = draw(st.one_of(st.sampled_from(list(Channel)), st.text(max_size=4)))
    lap = draw(
        st.one_of(
            st.none(),
            st.builds(
                LapHeader,
                name=st.text(max_size=4),
                leader=st.integers(-2, 5),
                attempt=st.integers(0, 3),
                epoch=st.integers(-1, 5),
                visited=st.lists(st.integers(0, 5), max_size=3).map(tuple),
                contributors=st.lists(st.integers(0, 5), max_size=3).map(tuple),
            ),
        )
    )
    return Payload(
        sender=draw(st.one_of(st.integers(-3, 9), numbers)),
        round=draw(st.one_of(st.integers(-2, 9), numbers)),
        epoch=draw(st.one_of(st.integers(-2, 9), numbers)),
        seq=draw(st.one_of(st.integers(0, 9), numbers)),
        tensors=draw(st.one_of(tensors(), st.none(), st.lists(st.integers(), max_size=2))),
        num_samples=draw(st.one_of(st.integers(-5, 100), numbers)),
        channel=channel,
        lap=lap,
    )


def well_formed_share(payload: Payload) -> bool:
    tensors = payload.tensors
    return (
        payload.channel == Channel.SHARE
        and payload.lap is None
        and isinstance(tensors, dict)
        and {k: tuple(v.shape) for k, v in tensors.items() if torch.is_tensor(v)}
        == {k: tuple(v.shape) for k, v in SHARED.items()}
        and all(torch.is_tensor(v) and v.dtype != torch.complex64 for v in tensors.values())
        and all(
            not v.is_floating_point() or bool(torch.isfinite(v).all()) for v in tensors.values()
        )
        and all(
            isinstance(getattr(payload, f), int) and not isinstance(getattr(payload, f), bool)
            for f in ("sender", "round", "epoch", "seq", "num_samples")
        )
        and payload.round >= 0
        and payload.num_samples >= 0
    )


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(payloads())
def test_any_payload_is_taken_whole_or_rejected_with_an_event(payload):
    client = CLIENT
    before = {k: v.clone() for k, v in client.algorithm.shared_state().items()}
    events_before = len(client.control.events)
    queued_before = len(client.inbox)
    accepted = client.receive(payload)  # never raises
    assert isinstance(accepted, bool)
    for name, value in client.algorithm.shared_state().items():
        assert torch.equal(value, before[name])  # nothing touches the model on receipt
    if not accepted:
        assert len(client.control.events) > events_before  # every rejection is an event
        assert len(client.inbox) == queued_before
    elif payload.channel == Channel.SHARE:
        assert well_formed_share(payload)
        sizes = [t.numel() * t.element_size() for t in payload.tensors.values()]
        assert sum(sizes) <= CONFIG.schedule.max_payload_bytes
    client.inbox.take(Channel.SHARE)


def test_a_well_formed_share_is_taken():
    client = fresh_client()
    payload = Payload(1, 0, 2, 0, {k: v.clone() for k, v in SHARED.items()}, num_samples=4)
    assert client.receive(payload)
    assert [p.sender for p in client.inbox.take(Channel.SHARE)] == [1]
    assert not math.isnan(float(next(iter(payload.tensors.values())).sum()))
