"""Compute slots: no more clients of a node train or evaluate at once than it runs at full speed.

Clients may outnumber cores (or GPU capacity) many times over. Left alone, eight single-thread
clients on two cores each run at a fraction of their speed and the round waits for the slowest;
admitted two at a time, each runs at full speed and the node stays busy. One pool actor per node
grants the slots. It is an asyncio actor, so a waiting client costs no CPU (it blocks in
``ray.get``), requests are served in the run's ``clients.slot_order`` (by default oldest round
first, so sync and async rounds, laps and joins keep their order), and a holder's slot is a
lease its client renews from a side thread: a holder that died or froze stops renewing and its
slot is reclaimed, with no handle to the holder and no call to it. A client waits for a slot
``timeouts.slot_wait_s`` at most, then withdraws its request and computes without one.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import ray
from ray.exceptions import GetTimeoutError

from ring_actors.runtime.ray_transport import CALLEE_DIED
from ring_actors.runtime.worker_env import loaded_modules
from ring_actors.timeouts import SLOT_LEASE_S

log = logging.getLogger(__name__)


def node_resources(node_id: str) -> dict[str, float]:
    """The total resources Ray reports for one node."""
    for node in ray.nodes():
        if node["NodeID"] == node_id:
            return dict(node["Resources"])
    return {}


def pool_name(run_key: str, node_id: str) -> str:
    return f"ring-actors-{run_key}-slots-{node_id}"


SLOT_ORDERS = ("oldest_round", "first_come", "least_recent")


@dataclass(order=True)
class _Request:
    key: tuple[float, ...]
    client: int = field(compare=False)
    round: int = field(compare=False)
    granted: asyncio.Event = field(compare=False, default_factory=asyncio.Event)
    token: int = field(compare=False, default=-1)
    hold: tuple[int, int] = field(compare=False, default=(-1, 0))


@dataclass
class _Grant:
    client: int
    renewed: float
    hold: tuple[int, int]  # the client and which of its round's holds (training, evaluation)
    granted: float


class SlotPool:
    """Grants at most ``limit`` slots at a time, in the order ``order`` names:

    - ``oldest_round``: the lowest round first, then the longest hold first (as long as the
      client's same hold of its last round took), then first come. The client furthest
      behind computes next, so a sync ring's round is not held up by a client that waited;
      within a round, a client with twice the data starts before the others rather than
      after them, when it alone would hold the round up;
    - ``first_come``: the order of the requests, whatever their round;
    - ``least_recent``: a client finishing a round it was already granted a slot for (its
      evaluation after its training) first, then the client granted a slot longest ago (one
      never granted before all), then the lowest round: every client's state stays about
      equally fresh, so an async ring does not let the fast clients take the slots over.

    A client holds at most one slot: a new request from a client that still holds one (a
    process Ray restarted) returns the old one first. A slot not renewed for ``lease_s`` is
    taken back.
    """

    def __init__(
        self, limit: int, lease_s: float = SLOT_LEASE_S, order: str = "oldest_round"
    ) -> None:
        if order not in SLOT_ORDERS:
            raise ValueError(f"slot order {order!r}: must be one of {', '.join(SLOT_ORDERS)}")
        self.limit = limit
        self.lease_s = lease_s
        self.order = order
        self.last_granted: dict[int, tuple[int, int]] = {}  # client: (grant number, round)
        self.holds_in_round: dict[int, tuple[int, int]] = {}  # client: (round, holds so far)
        self.held_s: dict[tuple[int, int], float] = {}  # (client, hold): how long it last took
        self.waiting: list[_Request] = []
        self.held: dict[int, _Grant] = {}
        self.seq = itertools.count()
        self.tokens = itertools.count(1)
        self.granted = 0
        self.most_held = 0
        self.reclaimed = 0
        self.reaper: asyncio.Task | None = None

    async def acquire(self, client_id: int, round_: int) -> int:
        """Wait for a slot; returns the token that renews and releases it."""
        for token, grant in list(self.held.items()):
            if grant.client == client_id:
                del self.held[token]
        request = _Request(self._key(client_id, round_), client_id, round_)
        request.hold = self._count_hold(client_id, round_)
        heapq.heappush(self.waiting, request)
        self._dispatch()
        if self.reaper is None:
            self.reaper = asyncio.get_running_loop().create_task(self._reclaim_expired())
        try:
            await request.granted.wait()
        except asyncio.CancelledError:  # the client stopped waiting (``Slots.wait_s``)
            self._withdraw(request)
            raise
        return request.token

    def _withdraw(self, request: _Request) -> None:
        """A request given up: out of the queue, or its slot back if granted meanwhile."""
        if request.granted.is_set():
            self.held.pop(request.token, None)
        else:
            self.waiting = [r for r in self.waiting if r is not request]
            heapq.heapify(self.waiting)
        self._dispatch()

    def _key(self, client_id: int, round_: int) -> tuple[float, ...]:
        arrival = next(self.seq)
        if self.order == "first_come":
            return (arrival,)
        if self.order == "least_recent":
            grant, granted_round = self.last_granted.get(client_id, (-1, -1))
            return (-2 if granted_round == round_ else grant, round_, arrival)
        return (round_, -self.held_s.get(self._next_hold(client_id, round_), 0.0), arrival)

    def _next_hold(self, client_id: int, round_: int) -> tuple[int, int]:
        seen_round, holds = self.holds_in_round.get(client_id, (-1, 0))
        return client_id, holds if seen_round == round_ else 0

    def _count_hold(self, client_id: int, round_: int) -> tuple[int, int]:
        hold = self._next_hold(client_id, round_)
        self.holds_in_round[client_id] = (round_, hold[1] + 1)
        return hold

    async def renew(self, token: int) -> bool:
        """Extend a lease; False if it was already taken back."""
        grant = self.held.get(token)
        if grant is not None:
            grant.renewed = time.monotonic()
        return grant is not None

    async def release(self, token: int) -> None:
        """Give a slot back (idempotent: a reclaimed token is ignored)."""
        grant = self.held.pop(token, None)
        if grant is not None:
            self.held_s[grant.hold] = time.monotonic() - grant.granted
        self._dispatch()

    async def status(self) -> dict[str, int]:
        return {
            "limit": self.limit,
            "held": len(self.held),
            "waiting": len(self.waiting),
            "granted": self.granted,
            "most_held": self.most_held,
            "reclaimed": self.reclaimed,
        }

    async def loaded_modules(self) -> list[str]:
        return loaded_modules()

    def _dispatch(self) -> None:
        while self.waiting and len(self.held) < self.limit:
            request = heapq.heappop(self.waiting)
            request.token = next(self.tokens)
            now = time.monotonic()
            self.held[request.token] = _Grant(request.client, now, request.hold, now)
            self.last_granted[request.client] = (self.granted, request.round)
            self.granted += 1
            self.most_held = max(self.most_held, len(self.held))
            request.granted.set()

    async def _reclaim_expired(self) -> None:
        while True:
            await asyncio.sleep(self.lease_s / 4)
            now = time.monotonic()
            for token, grant in list(self.held.items()):
                if now - grant.renewed > self.lease_s:
                    log.warning(
                        "client %d lost its slot: no renewal in %gs", grant.client, self.lease_s
                    )
                    del self.held[token]
                    self.reclaimed += 1
            self._dispatch()


class Slots:
    """A client's side of its node's pool: ``with slots.hold(round_):`` around compute.

    Without a pool (a node the driver made none for) compute is not gated; if the pool dies
    mid-run, or grants no slot within ``wait_s`` (``timeouts.slot_wait_s``), the client
    computes without one rather than stall the ring: a pool that falls that far behind
    is stuck, and the round's compute is better late than never. While a slot is held, a side
    thread renews its lease.
    """

    def __init__(
        self, name: str | None, client_id: int, wait_s: float, lease_s: float = SLOT_LEASE_S
    ) -> None:
        self.name = name
        self.client_id = client_id
        self.wait_s = wait_s
        self.lease_s = lease_s
        self.pool: ray.actor.ActorHandle | None = None
        self.waited_s = 0.0  # time spent waiting for slots, for the round's metrics
        self.token: int | None = None  # the slot held now (tokens are never reused)

    @contextmanager
    def hold(self, round_: int) -> Iterator[None]:
        self.token = token = self._acquire(round_)
        if token is not None:
            threading.Thread(target=self._renew, args=(token,), daemon=True).start()
        try:
            yield
        finally:
            if token is not None:
                self.token = None
                self.pool.release.remote(token)

    def _renew(self, token: int) -> None:
        while True:
            time.sleep(self.lease_s / 4)
            if self.token != token:
                return
            self.pool.renew.remote(token)

    def _acquire(self, round_: int) -> int | None:
        pool = self._pool()
        if pool is None:
            return None
        started = time.monotonic()
        call = pool.acquire.remote(self.client_id, round_)
        try:
            return ray.get(call, timeout=self.wait_s)
        except GetTimeoutError:
            # Withdrawn: a slot granted as it is, unrenewed, goes back within a lease.
            ray.cancel(call)
            log.warning(
                "client %d computes round %d without a slot: none granted in %g s",
                self.client_id,
                round_,
                self.wait_s,
            )
            return None
        except CALLEE_DIED as err:
            log.warning("client %d computes without a slot: %r", self.client_id, err)
            self.name, self.pool = None, None  # the pool is gone: stop asking
            return None
        finally:
            self.waited_s += time.monotonic() - started

    def _pool(self) -> ray.actor.ActorHandle | None:
        if self.pool is None and self.name is not None:
            try:
                self.pool = ray.get_actor(self.name)
            except ValueError:
                log.warning("client %d: no slot pool %s", self.client_id, self.name)
                self.name = None
        return self.pool
