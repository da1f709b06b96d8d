"""How Ray's errors read to the cores: a peer whose process died is gone (its payload is
re-sent past it), a peer being restarted is unavailable, and a receiver's own error is
neither."""

from __future__ import annotations

import time

import pytest
import ray
from ray.exceptions import OutOfMemoryError, WorkerCrashedError

from ring_actors.delivery.transport import PeerGone
from ring_actors.runtime.ray_transport import RayPending

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
