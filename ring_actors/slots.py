"""Compute slots: no more clients of a node train or evaluate at once than it runs at full speed.

Clients may outnumber cores (or GPU capacity) many times over. Left alone, eight single-thread
clients on two cores each run at a fraction of their speed and the round waits for the slowest;
admitted two at a time, each runs at full speed and the node stays busy. One pool actor per node
grants the slots. It is an asyncio actor, so a waiting client costs no CPU (it blocks in
``ray.get``), requests are served oldest round first (sync and async rounds, laps and joins
keep their order), and a holder that died or went silent is probed and its slot reclaimed.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

import ray
from ray.exceptions import RayActorError, RayError

log = logging.getLogger(__name__)


def slot_limit(concurrency: int | str, slots_per_gpu: int, num_gpus: float, node: Mapping) -> int:
    """Clients of one node allowed to compute at once.

    ``auto``: the node's cores, or, for clients on GPUs, its GPUs times ``slots_per_gpu``.
    """
    if concurrency != "auto":
        return int(concurrency)
    if num_gpus > 0 and node.get("GPU", 0) >= 1:
        return max(1, int(node["GPU"]) * slots_per_gpu)
    return max(1, int(node.get("CPU", 1)))


def threads_per_slot(limit: int, node: Mapping) -> int:
    """Torch threads of one computing client: the node's cores shared by its slots."""
    return max(1, int(node.get("CPU", 1)) // limit)


def node_resources(node_id: str) -> dict[str, float]:
    """The total resources Ray reports for one node."""
    for node in ray.nodes():
        if node["NodeID"] == node_id:
            return dict(node["Resources"])
    return {}


def pool_name(run_key: str, node_id: str) -> str:
    return f"ring-actors-{run_key}-slots-{node_id}"


@dataclass(order=True)
class _Request:
    round: int
    seq: int
    client: int = field(compare=False)
    holder: ray.actor.ActorHandle | None = field(compare=False)
    granted: asyncio.Event = field(compare=False, default_factory=asyncio.Event)
    token: int = field(compare=False, default=-1)


@dataclass
class _Grant:
    client: int
    holder: ray.actor.ActorHandle | None
    since: float


class SlotPool:
    """Grants at most ``limit`` slots at a time, lowest round first (then first come).

    A client holds at most one slot: a new request from a client that still holds one (a
    process Ray restarted) returns the old one first. While someone waits, every holder that
    has held for ``probe_s`` is pinged; one that is dead or silent for ``silence_s`` loses it.
    """

    def __init__(self, limit: int, probe_s: float = 1.0, silence_s: float = 30.0) -> None:
        self.limit = limit
        self.probe_s = probe_s
        self.silence_s = silence_s
        self.waiting: list[_Request] = []
        self.held: dict[int, _Grant] = {}
        self.seq = itertools.count()
        self.tokens = itertools.count(1)
        self.granted = 0
        self.most_held = 0
        self.reclaimed = 0
        self.prober: asyncio.Task | None = None

    async def acquire(
        self, client_id: int, round_: int, holder: ray.actor.ActorHandle | None = None
    ) -> int:
        """Wait for a slot; returns the token that releases it."""
        for token, grant in list(self.held.items()):
            if grant.client == client_id:
                self._free(token)
        request = _Request(round_, next(self.seq), client_id, holder)
        heapq.heappush(self.waiting, request)
        self._dispatch()
        if self.prober is None:
            self.prober = asyncio.get_running_loop().create_task(self._probe_holders())
        await request.granted.wait()
        return request.token

    async def release(self, token: int) -> None:
        """Give a slot back (idempotent: a reclaimed token is ignored)."""
        if token in self.held:
            self._free(token)
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

    def _free(self, token: int) -> None:
        del self.held[token]

    def _dispatch(self) -> None:
        while self.waiting and len(self.held) < self.limit:
            request = heapq.heappop(self.waiting)
            request.token = next(self.tokens)
            self.held[request.token] = _Grant(request.client, request.holder, time.monotonic())
            self.granted += 1
            self.most_held = max(self.most_held, len(self.held))
            request.granted.set()

    async def _probe_holders(self) -> None:
        while True:
            await asyncio.sleep(self.probe_s)
            if not self.waiting:
                continue
            now = time.monotonic()
            due = {
                token: grant
                for token, grant in self.held.items()
                if grant.holder is not None and now - grant.since >= self.probe_s
            }
            alive = await asyncio.gather(*(self._answers(g.holder) for g in due.values()))
            for (token, grant), ok in zip(due.items(), alive, strict=True):
                if not ok and token in self.held:
                    log.warning("client %d lost its slot: dead or silent", grant.client)
                    self.reclaimed += 1
                    self._free(token)
            self._dispatch()

    async def _answers(self, holder: ray.actor.ActorHandle) -> bool:
        try:
            await asyncio.wait_for(holder.ping.remote(), timeout=self.silence_s)
            return True
        except (RayActorError, asyncio.TimeoutError):
            return False
        except RayError:  # any other failure to answer is not proof of death
            return True


class Slots:
    """A client's side of its node's pool: ``with slots.hold(round_):`` around compute.

    Without a pool (concurrency off, or a node the driver made none for) compute is not gated;
    if the pool dies mid-run, the client keeps computing rather than stall the ring.
    """

    def __init__(self, name: str | None, client_id: int, me: ray.actor.ActorHandle | None) -> None:
        self.name = name
        self.client_id = client_id
        self.me = me
        self.pool: ray.actor.ActorHandle | None = None
        self.waited_s = 0.0  # time spent waiting for slots, for the round's metrics

    @contextmanager
    def hold(self, round_: int) -> Iterator[None]:
        token = self._acquire(round_)
        try:
            yield
        finally:
            if token is not None:
                self.pool.release.remote(token)

    def _acquire(self, round_: int) -> int | None:
        pool = self._pool()
        if pool is None:
            return None
        started = time.monotonic()
        try:
            return ray.get(pool.acquire.remote(self.client_id, round_, self.me))
        except RayActorError as err:
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
