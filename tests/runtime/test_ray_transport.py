"""How Ray's errors read to the cores: a peer whose process died is gone (its payload is
re-sent past it), a peer being restarted is unavailable, and a receiver's own error is
neither; an answer to a pull is refused by its size before it is rebuilt; and each declared
call is made over an actor as its declaration says."""

from __future__ import annotations

import time

import pytest
import ray
import torch
from ray.exceptions import OutOfMemoryError, WorkerCrashedError

from ring_actors.delivery.payloads import Channel, Payload, PayloadError
from ring_actors.delivery.transport import Call, PeerGone, Reply
from ring_actors.delivery.wire import to_wire
from ring_actors.runtime.ray_transport import RayClientHandle, RayPending, bounded, call_actor

pytestmark = pytest.mark.slow  # starts Ray


@ray.remote
class Peer:
    def fail(self, error: Exception) -> None:
        raise error

    def ping(self) -> int:
        return 1

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


def test_a_call_whose_process_was_killed_for_memory_reads_as_a_gone_peer(ray_local):
    peer = Peer.remote()
    for error in (OutOfMemoryError("killed by the memory monitor"), WorkerCrashedError()):
        with pytest.raises(PeerGone, match=type(error).__name__):
            RayPending(peer.fail.remote(error)).result(30)


def test_a_dead_actor_is_gone_and_a_receivers_own_error_is_not(ray_local):
    peer = Peer.remote()
    with pytest.raises(ValueError):
        RayPending(peer.fail.remote(ValueError("malformed payload"))).result(30)
    assert RayPending(peer.ping.remote()).result(30) == 1
    in_flight = peer.sleep.remote(120)  # a call made after ray.kill may run before the kill lands
    ray.kill(peer, no_restart=True)
    with pytest.raises(PeerGone, match="ActorDiedError"):
        RayPending(in_flight).result(60)


@ray.remote
class Publisher:
    def serve(self, round_: int, keys: tuple[str, ...]):
        """2 MiB of NaN: refused as non-finite if rebuilt, by its size if not."""
        tensors = {k: torch.full((2**19,), float("nan")) for k in keys}
        return to_wire(Payload(1, round_, 1, round_, tensors, channel=Channel.PULLED))


def test_an_answer_to_a_pull_over_the_limit_is_refused_before_it_is_rebuilt(ray_local):
    """The limit is the puller's, set on the handles it holds (the coordinator that hands
    them out knows no method's size)."""
    publisher = RayClientHandle(Publisher.remote())
    small = bounded({1: publisher}, max_bytes=2**20)[1]
    with pytest.raises(PayloadError, match="exceed the limit of 1048576"):
        small.serve(0, ("w",)).result(60)
    large = bounded({1: publisher}, max_bytes=2**22)[1]
    with pytest.raises(PayloadError, match="non-finite"):  # within it: rebuilt and checked
        large.serve(0, ("w",)).result(60)


@ray.remote
class Client:
    """A client actor's calls, recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def lap_result(self, name: str, round_: int) -> tuple[str, int]:
        return name, round_

    def start(self, first_round: int = 0, joining=None) -> None:
        self.calls.append(("start", first_round, joining))

    def resume(self, struck_through: int = -1) -> None:
        self.calls.append(("resume",))

    def heard(self) -> list[tuple]:
        return self.calls


def test_a_handles_derived_calls_reach_the_client_actor_as_declared(ray_local):
    actor = Client.remote()
    handle = RayClientHandle(actor)
    answer = handle.lap_result("mean", round_=2)
    assert isinstance(answer, RayPending) and answer.result(60) == ("mean", 2)
    assert handle.start(3) is None and handle.resume() is None  # one-way: sent, not waited on
    assert ray.get(actor.heard.remote(), timeout=60) == [("start", 3, None), ("resume",)]


def test_a_held_call_lets_its_caller_go_at_its_bound_and_an_answered_one_does_not(ray_local):
    """A round's report held past the bound goes on (the journal keeps it); a call whose
    answer the caller needs raises instead."""
    peer = Peer.options(max_concurrency=4).remote()
    started = time.monotonic()
    assert call_actor(peer, "sleep", Call(Reply.HELD), (60,), {}, timeout_s=0.5) is None
    with pytest.raises(TimeoutError):
        call_actor(peer, "sleep", Call(Reply.ANSWER), (60,), {}, timeout_s=0.5)
    assert time.monotonic() - started < 30
    assert call_actor(peer, "ping", Call(Reply.ANSWER), (), {}, timeout_s=60) == 1
    ray.kill(peer)
    gone = call_actor(peer, "ping", Call(Reply.HELD), (), {}, timeout_s=60)
    assert gone is None  # a callee gone costs a held call nothing further
