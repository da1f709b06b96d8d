"""Who computes next: each ``clients.slot_order`` grants waiting clients in the order it
documents (constructed cases on the pool itself, one slot, several waiters)."""

from __future__ import annotations

import asyncio

import pytest

from ring_actors.config import ConfigError, config_from_dict
from ring_actors.runtime.slots import SlotPool


async def _grant_order(pool: SlotPool, requests: list[tuple[int, int]]) -> list[int]:
    """Fill the pool, queue ``(client, round)`` requests in this order, then release one
    slot at a time: the clients in the order they got one."""
    held = [await pool.acquire(100 + i, 0) for i in range(pool.limit)]
    waiters = {c: asyncio.create_task(pool.acquire(c, r)) for c, r in requests}
    await asyncio.sleep(0)
    assert not any(task.done() for task in waiters.values())
    order: list[int] = []
    for token in held:
        await pool.release(token)
        await asyncio.sleep(0)
        done = [c for c, task in waiters.items() if task.done() and c not in order]
        assert len(done) == 1  # a release admits exactly one waiter
        order.append(done[0])
        held.append(waiters[done[0]].result())
        if len(order) == len(requests):
            break
    return order


REQUESTS = [(0, 3), (1, 1), (2, 4), (3, 2)]  # (client, round), in the order they ask


def test_oldest_round_grants_the_lowest_round_first():
    pool = SlotPool(1, order="oldest_round")
    assert asyncio.run(_grant_order(pool, REQUESTS)) == [1, 3, 0, 2]


def test_oldest_round_starts_the_longest_compute_of_a_round_first():
    """Within a round, the client whose same hold took longest last round goes first: one
    with twice the data, started last, would hold the round up alone. Training (a round's
    first hold) and evaluation (its second) are timed apart."""

    async def scenario() -> list[int]:
        pool = SlotPool(1, order="oldest_round")
        for client, train_s in ((0, 0.05), (1, 0.1), (2, 0.2)):  # round 0: 2 trains longest
            token = await pool.acquire(client, 0)
            await asyncio.sleep(train_s)
            await pool.release(token)
            await pool.release(await pool.acquire(client, 0))  # its evaluation, short
        await pool.release(await pool.acquire(0, 1))  # client 0 trained round 1 already
        # Client 0 now evaluates, the shortest hold: after both trainings, the longer first.
        return await _grant_order(pool, [(0, 1), (1, 1), (2, 1)])

    assert asyncio.run(scenario()) == [2, 1, 0]


def test_first_come_grants_in_the_order_of_asking():
    pool = SlotPool(1, order="first_come")
    assert asyncio.run(_grant_order(pool, REQUESTS)) == [0, 1, 2, 3]


def test_least_recent_grants_the_client_served_longest_ago_first():
    async def scenario() -> list[int]:
        pool = SlotPool(1, order="least_recent")
        for client in (2, 0, 3):  # served in this order before: 2 longest ago, 3 last
            await pool.release(await pool.acquire(client, 0))
        # client 1 was never served: first; then 2, 0, 3 whatever their rounds
        return await _grant_order(pool, [(3, 1), (0, 1), (1, 9), (2, 5)])

    assert asyncio.run(scenario()) == [1, 2, 0, 3]


def test_least_recent_lets_a_client_finish_the_round_it_was_served_for():
    """Training and evaluation each take a slot: the second request of a round goes first,
    so a client's round is not split by a whole rotation of the others."""

    async def scenario() -> list[int]:
        pool = SlotPool(1, order="least_recent")
        await pool.release(await pool.acquire(0, 4))  # client 0 trained round 4
        return await _grant_order(pool, [(1, 4), (2, 4), (0, 4)])  # 0 now evaluates round 4

    assert asyncio.run(scenario()) == [0, 1, 2]


def test_an_unknown_order_is_a_config_error_naming_the_key():
    with pytest.raises(ConfigError, match=r"clients\.slot_order.*least_recent"):
        config_from_dict({"clients": {"slot_order": "fastest"}})
