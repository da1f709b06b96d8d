"""Property-based: whatever arrives, a client either takes it whole or rejects it (with an
event), never raises, and its model is untouched until it merges what it took."""

from __future__ import annotations

import itertools
import math
import threading
import time
from concurrent.futures import Future
from dataclasses import replace

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ring_actors.client.core import ClientCore
from ring_actors.client.method_factory import build_algorithm
from ring_actors.client.resources import ClientData
from ring_actors.config import config_from_dict
from ring_actors.delivery.payloads import Channel, LapHeader, Payload
from ring_actors.delivery.view import View
from ring_actors.delivery.wire import WirePayload, WireTensor, to_wire
from tests.helpers.client_links import Peer, Reports
from tests.helpers.synthetic import separable

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


@st.composite
def wire_payloads(draw) -> tuple[WirePayload, bool]:
    """What another process may send: the receiver's own tensors as bytes, each kept, left
    out, of another type or shape, a byte short, or with a NaN or an infinity anywhere; and
    whether anything is wrong with them."""
    sent = Payload(1, 0, 2, 0, {k: v.clone() for k, v in SHARED.items()})
    wire, wrong = to_wire(replace(sent, num_samples=4)), False
    tensors = dict(wire.tensors)
    for name, value in SHARED.items():
        kept = tensors[name]
        change = draw(st.sampled_from(["keep", "drop", "dtype", "flat", "short", "poke"]))
        if change == "drop":
            del tensors[name]
        elif change == "dtype":
            dtype = draw(st.sampled_from(["float32", "float64", "float16", "complex64", "Tensor"]))
            data = (
                kept.data
                if dtype in ("float32", "Tensor")
                else _bytes(value.to(getattr(torch, dtype)))
            )
            tensors[name] = WireTensor(dtype, kept.shape, data)
        elif change == "flat":  # the same bytes as one row: a shape of its own unless 1-D
            tensors[name] = WireTensor(kept.dtype, (value.numel(),), kept.data)
        elif change == "short":
            tensors[name] = WireTensor(kept.dtype, kept.shape, kept.data[:-1])
        elif change == "poke":
            poked = value.clone().view(-1)
            poked[draw(st.integers(0, poked.numel() - 1))] = draw(
                st.sampled_from([math.nan, math.inf, -math.inf])
            )
            tensors[name] = WireTensor(kept.dtype, kept.shape, _bytes(poked))
        got = tensors.get(name)
        wrong |= got is None or (got.dtype, got.shape, got.data.size) != (
            kept.dtype, kept.shape, kept.data.size
        ) or change == "poke"  # fmt: skip
    if draw(st.integers(0, 9)) == 0:
        tensors["huge"] = WireTensor("float32", (2**22,), np.zeros(2**24, np.uint8))
        wrong = True
    return replace(wire, tensors=tensors), wrong


SEQ = itertools.count()


def _bytes(tensor: torch.Tensor) -> np.ndarray:
    return tensor.contiguous().view(-1).view(torch.uint8).numpy().copy()


@pytest.mark.slow
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(wire_payloads())
def test_bytes_from_another_process_are_taken_whole_or_rejected_with_an_event(case):
    wire, wrong = case
    wire = replace(wire, shell=replace(wire.shell, seq=next(SEQ)))  # never a re-send
    client = CLIENT
    before = {k: v.clone() for k, v in client.algorithm.shared_state().items()}
    events_before = len(client.control.events)
    accepted = client.receive(wire)  # never raises
    for name, value in client.algorithm.shared_state().items():
        assert torch.equal(value, before[name])  # nothing touches the model on receipt
    assert accepted is not wrong
    taken = client.inbox.take(Channel.SHARE)
    if wrong:
        assert len(client.control.events) > events_before and not taken
    else:
        assert [p.sender for p in taken] == [1]
        assert {k: (v.shape, v.dtype) for k, v in taken[0].tensors.items()} == {
            k: (v.shape, v.dtype) for k, v in SHARED.items()
        }
        assert all(torch.equal(taken[0].tensors[k], v) for k, v in SHARED.items())


def test_a_well_formed_share_is_taken():
    client = fresh_client()
    payload = Payload(1, 0, 2, 0, {k: v.clone() for k, v in SHARED.items()}, num_samples=4)
    assert client.receive(payload)
    assert [p.sender for p in client.inbox.take(Channel.SHARE)] == [1]
    assert not math.isnan(float(next(iter(payload.tensors.values())).sum()))


def rejected_with_event(client: ClientCore, payload: Payload) -> bool:
    before = len(client.control.events)
    accepted = client.receive(payload)
    events = client.control.events[before:]
    return not accepted and [e[0] for e in events] == ["payload_rejected"]


def test_a_share_of_another_dtype_is_rejected():
    client = fresh_client()
    tensors = {k: v.clone().double() for k, v in SHARED.items()}  # shapes right, dtype not
    assert rejected_with_event(client, Payload(1, 0, 2, 0, tensors, num_samples=4))


def test_a_mis_shaped_init_is_rejected_not_acknowledged():
    client = fresh_client()
    wrong = {k: torch.zeros(3) for k in client.published.hand_off}
    assert rejected_with_event(client, Payload(1, 0, 2, 0, wrong, channel=Channel.INIT))
    right = {k: v.clone() for k, v in client.published.hand_off.items()}
    assert client.receive(Payload(1, 0, 2, 1, right, channel=Channel.INIT))


@pytest.mark.parametrize("field", ["round", "epoch"])
def test_rounds_and_epochs_far_beyond_the_receivers_are_rejected(field):
    client = fresh_client()
    fields = {"sender": 1, "round": 0, "epoch": 2, "seq": 0, "num_samples": 4} | {field: 10**9}
    payload = Payload(tensors={k: v.clone() for k, v in SHARED.items()}, **fields)
    assert rejected_with_event(client, payload)
    assert client.inbox.newest(Channel.SHARE, 1) == -1  # async would never wait for 1 again


@pytest.mark.parametrize(
    "header",
    [
        LapHeader("avg", leader="0", attempt=0, epoch=2),
        LapHeader("avg", leader=0, attempt=0, epoch=2, visited=("x",)),
        LapHeader("avg", leader=0, attempt=-1, epoch=2),
        LapHeader(7, leader=0, attempt=0, epoch=2),
        LapHeader("avg", leader=0, attempt=0, epoch=2, contributors=[0]),
    ],
)
def test_lap_headers_with_fields_of_the_wrong_type_are_rejected(header):
    client = fresh_client()
    token = Payload(1, 0, 2, 0, {"w": torch.ones(2)}, channel=Channel.LAP, lap=header)
    assert rejected_with_event(client, token)


def test_the_size_limit_counts_the_storage_a_view_drags_along():
    client = fresh_client()
    tensors = {k: v.clone() for k, v in SHARED.items()}
    name = next(iter(tensors))
    big = torch.zeros(tensors[name].numel() + 2**23)  # 32 MB of storage behind a small view
    tensors[name] = big[: tensors[name].numel()].view_as(tensors[name])
    assert rejected_with_event(client, Payload(1, 0, 2, 0, tensors, num_samples=4))


def test_the_default_size_limit_is_derived_from_the_model_not_2_gib():
    config = config_from_dict({"clients": {"count": 3}, "algorithm": {"name": "dfedavg"}})
    method = build_algorithm(config, 0, 4, SHAPE, torch.device("cpu"))
    client = ClientCore(0, config, method, ClientData(DATA, DATA, DATA), Reports())
    model = sum(v.numel() * v.element_size() for v in SHARED.values())
    assert model <= client.max_payload_bytes < 2**31
    assert client.max_payload_bytes <= (config.total_clients + 1) * model + 2**20


class LapPeer(Peer):
    """A peer that acknowledges everything and holds no lap result yet."""

    def lap_result(self, name, round_) -> Future:
        future: Future = Future()
        future.set_result(None)
        return future


def test_a_lap_token_that_would_broadcast_into_the_contribution_is_refused():
    config = config_from_dict(
        {"clients": {"count": 3}, "algorithm": {"name": "fedavg"}, "schedule": {"hop_timeout_s": 1}}
    )
    method = build_algorithm(config, 0, 4, SHAPE, torch.device("cpu"))
    client = ClientCore(0, config, method, ClientData(DATA, DATA, DATA), Reports())
    successor = LapPeer()
    client.set_view(View(2, (0, 1, 2), (0, 0, 0)), {1: successor, 2: LapPeer()})
    contribution = method.contribute("avg", 1)
    name = next(iter(contribution))
    header = LapHeader("avg", leader=1, attempt=0, epoch=2, visited=(1,), contributors=(1,))
    token = {name: torch.ones(1)}  # one element: adding it to ours would broadcast
    assert client.receive(Payload(2, 1, 2, 0, token, channel=Channel.LAP, lap=header))
    result: list = []
    client.laps.chunk_min_bytes = 2**62  # the single-token lap this test is about
    lap = threading.Thread(target=lambda: result.append(client.laps.run("avg", 1, contribution)))
    lap.start()
    deadline = time.monotonic() + 10
    while ("lap_token_refused", 1) not in [e[:2] for e in client.control.events]:
        assert time.monotonic() < deadline, "the token was never refused"
        time.sleep(0.05)
    assert not [p for p in successor.got if p.channel == Channel.LAP]  # nothing forwarded
    total = {k: v.clone() * 3 for k, v in contribution.items()}
    done = LapHeader("avg", leader=1, attempt=0, epoch=2, visited=(1,), contributors=(0, 1, 2))
    assert client.receive(Payload(1, 1, 2, 0, total, channel=Channel.LAP_RESULT, lap=done))
    lap.join(5)
    assert result and result[0].contributors == (0, 1, 2)
