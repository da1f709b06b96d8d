"""A lap's latency is its hops': a member waiting for the lap wakes as its total arrives,
not at the inbox's next timed wait."""

from __future__ import annotations

import statistics
import threading
import time

import torch

from ring_actors.delivery.view import View
from ring_actors.in_process import InProcessRing
from tests.helpers.in_process_ring import ring

MEMBERS = 3
LAPS = 5
# A timed wait of 50 ms on each member missing its wake-up makes a lap take 50 ms or more;
# its hops in one process take a few milliseconds, even on a loaded machine.
BOUND_S = 0.04


def joined(tmp_path) -> InProcessRing:
    """The in-process ring's cores, each holding one view and a handle to every other."""
    local = ring(tmp_path, count=MEMBERS, rounds=LAPS + 1)
    view = View(1, tuple(range(MEMBERS)), (0,) * MEMBERS)
    for member, client in local.clients.items():
        handles = {p: local.handle(p) for p in view.members if p != member}
        client.core.set_view(view, handles)
    return local


def lap_seconds(local: InProcessRing, round_: int) -> float:
    """Wall time of one lap of a tiny contribution, every member running it on its thread."""
    totals: dict[int, float] = {}

    def take_part(member: int) -> None:
        part = {"x": torch.tensor([float(2**member)])}
        result = local.clients[member].core.laps.run("avg", round_, part)
        totals[member] = float(result.total["x"]) if result is not None else float("nan")

    threads = [threading.Thread(target=take_part, args=(m,)) for m in range(MEMBERS)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    elapsed = time.monotonic() - started
    assert totals == dict.fromkeys(range(MEMBERS), float(2**MEMBERS - 1))
    return elapsed


def test_a_lap_among_three_members_takes_its_hops_time_not_the_inbox_tick(tmp_path):
    local = joined(tmp_path)
    times = [lap_seconds(local, round_) for round_ in range(1, LAPS + 1)]
    assert statistics.median(times) < BOUND_S, [f"{t * 1000:.1f} ms" for t in times]


def test_a_new_view_wakes_a_wait_on_it_at_once(tmp_path):
    """A bypass or a new leader is acted on as the view lands, not a tick later."""
    core = ring(tmp_path, count=MEMBERS).clients[0].core
    latencies = []
    for epoch in range(1, LAPS + 1):
        waiter = threading.Thread(
            target=core.inbox.wait,
            args=(lambda e=epoch: core.current_view.epoch >= e, 5.0, core.tick),
        )
        waiter.start()
        time.sleep(0.01)  # the waiter is well into a timed wait of up to 50 ms
        changed = time.monotonic()
        core.set_view(View(epoch, tuple(range(MEMBERS)), (0,) * MEMBERS), {})
        waiter.join(5)
        latencies.append(time.monotonic() - changed)
    assert statistics.median(latencies) < 0.02, [f"{t * 1000:.1f} ms" for t in latencies]
