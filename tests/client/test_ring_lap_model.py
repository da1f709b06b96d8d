"""The ring lap, checked under adversarial schedules: real client cores (their RingLaps,
Inbox and Outbox) joined by a network whose every message waits for a scheduler that
delivers, loses (the sender re-sends), duplicates or reorders it, crashes members and
changes the view; as one token, and in chunks (the ring all-reduce, its size threshold set
to nothing). Invariants, checked after every schedule:

- every member that ends the lap with a total holds the same total and the same
  contributors, and the total is exactly the sum of those contributors' contributions;
- with no crash, every member contributes (nothing acknowledged is lost);
- every member's wait ends (within the lap's give-up time);
- no token circles for ever: once the members are done, the network drains.
"""

from __future__ import annotations

import threading
import time

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ring_actors.delivery.payloads import Channel, LapHeader, Payload
from ring_actors.delivery.view import View
from tests.helpers.lap_sums import CHUNKED_SHAPE, LAP, ROUND, contribution, lap_value
from tests.helpers.scheduled_network import HOP_S, Net, adopt, ring


def run_schedule(members: int, schedule: list[tuple[str, int]], chunked: bool = False) -> dict:
    """Run one lap under ``schedule``; the members' outcomes and the network's state."""
    net, view = ring(members, chunked=chunked)
    results: dict[int, object] = {}
    started = time.monotonic()
    shape = CHUNKED_SHAPE if chunked else (1,)

    def lap(member: int) -> None:
        results[member] = net.cores[member].laps.run(LAP, ROUND, contribution(member, shape))

    threads = {m: threading.Thread(target=lap, args=(m,), daemon=True) for m in range(members)}
    for thread in threads.values():
        thread.start()
    crashed: set[int] = set()
    give_up = net.cores[0].timeouts.lap_give_up_s
    # A network silent for the lap's whole give-up time makes every member abandon the lap,
    # as designed; the schedule's pauses stay within half of it, so a lap can still finish.
    paused = 0.0
    for action, pick in schedule:
        if action == "crash":
            victim = pick % members
            if victim in crashed or len(crashed) + 2 > members:
                continue
            crashed.add(victim)
            net.crashed.add(victim)
            view = View(
                view.epoch + 1,
                tuple(m for m in view.members if m != victim),
                (0,) * (len(view.members) - 1),
            )
            for m in view.members:
                adopt(net, m, view)
        elif action == "wait":
            pause = HOP_S * (pick % 3)
            if paused + pause <= give_up / 2:
                time.sleep(pause)
                paused += pause
        else:
            net.step(action, pick)
        time.sleep(0.002)
    while any(t.is_alive() for t in threads.values()):  # then a fair network
        assert time.monotonic() - started < 3 * give_up + 10, "a member's wait never ended"
        net.step("deliver", 0)
        time.sleep(0.002)
    for thread in threads.values():
        thread.join(1)
    drained = 0
    while net.queue and drained < 50 * members:  # tokens left must die out
        net.step("deliver", 0)
        drained += 1
    return {"net": net, "results": results, "crashed": crashed, "live": view.members}


def check(outcome: dict, members: int) -> None:
    net, results, crashed = outcome["net"], outcome["results"], outcome["crashed"]
    assert not net.queue, f"tokens still circling: {[(t, p.lap) for t, p, _ in net.queue][:3]}"
    finished = {
        m: (tuple(sorted(r.contributors)), lap_value(r.total))
        for m, r in results.items()
        if r is not None and m not in crashed
    }
    for contributors, total in finished.values():
        assert len(set(contributors)) == len(contributors)
        assert total == sum(2**c for c in contributors), (contributors, total)
    assert len(set(finished.values())) <= 1, f"members applied different totals: {finished}"
    if not crashed:
        assert len(finished) == members  # every wait ended with the lap
        assert all(c == tuple(range(members)) for c, _ in finished.values())


actions = st.tuples(
    st.sampled_from(["deliver", "deliver", "deliver", "lose", "duplicate", "crash", "wait"]),
    st.integers(0, 7),
)


@pytest.mark.slow
@pytest.mark.parametrize("chunked", [False, True], ids=["token", "chunks"])
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.integers(3, 4), st.lists(actions, max_size=40))
def test_every_schedule_keeps_the_lap_exact_and_every_wait_bounded(chunked, members, schedule):
    check(run_schedule(members, schedule, chunked), members)


# ---- the defects a review found, each driven to its failure --------------------------------


def deliver_until(net: Net, done, limit_s: float = 5.0) -> None:
    deadline = time.monotonic() + limit_s
    while not done():
        assert time.monotonic() < deadline, "never got there"
        net.step("deliver", 0)
        time.sleep(0.005)


def lap_tokens(net: Net, sender: int | None = None, leader: int | None = None) -> list:
    with net.lock:
        return [
            (t, p)
            for t, p, _ in net.queue
            if p.channel == Channel.LAP
            and (sender is None or p.sender == sender)
            and (leader is None or p.lap.leader == leader)
        ]


def test_a_new_leaders_token_is_not_taken_for_a_duplicate_of_the_old_leaders():
    """Each leader counts attempts from 0: the forwarder's key (sender, round, attempt,
    lap) of the new leader's token equalled the old one's, and the inbox dropped it."""
    net, view = ring(4)  # round 1's leader is member 1
    threads = [
        threading.Thread(target=net.cores[m].laps.run, args=(LAP, ROUND, contribution(m)))
        for m in (0, 2, 3)
    ]
    for thread in threads:
        thread.start()
    header = LapHeader(LAP, leader=1, attempt=0, epoch=1, visited=(1,), contributors=(1,))
    assert net.cores[2].receive(
        Payload(1, ROUND, 1, 0, contribution(1), channel=Channel.LAP, lap=header)
    )
    deliver_until(net, lambda: lap_tokens(net, sender=3))  # 2 -> 3 delivered, 3 forwarded
    net.crashed.add(1)  # the leader dies; member 2 leads in the new view
    new = View(2, (0, 2, 3), (0, 0, 0))
    for m in new.members:
        adopt(net, m, new)
    with net.lock:  # the old epoch's tokens are gone with it
        net.queue = [(t, p, a) for t, p, a in net.queue if p.channel != Channel.LAP]
    deliver_until(net, lambda: lap_tokens(net, sender=2, leader=2))
    retry_s = net.cores[0].timeouts.lap_retry_s
    started = time.monotonic()
    deliver_until(net, lambda: lap_tokens(net, sender=3, leader=2), limit_s=retry_s)
    assert time.monotonic() - started < retry_s  # 3 forwarded it, no restart needed
    deliver_until(net, lambda: not any(t.is_alive() for t in threads), limit_s=10)


def result_token(
    leader: int, epoch: int, contributors: tuple[int, ...], sender: int | None = None
) -> Payload:
    sender = leader if sender is None else sender
    header = LapHeader(LAP, leader, 0, epoch, visited=(leader,), contributors=contributors)
    total = {"x": torch.tensor([float(sum(2**c for c in contributors))], dtype=torch.float64)}
    return Payload(sender, ROUND, epoch, 0, total, channel=Channel.LAP_RESULT, lap=header)


def test_a_member_forwards_the_result_it_kept_not_a_later_different_one():
    net, _ = ring(4)
    member = net.cores[2]
    assert member.receive(result_token(1, 1, (0, 1, 2, 3)))
    assert member.receive(result_token(1, 1, (1, 2)))  # another attempt's total
    kept = member.lap_result(LAP, ROUND)
    with net.lock:
        sent = [p for _, p, _ in net.queue if p.channel == Channel.LAP_RESULT]
    assert sent and all(p.lap.contributors == kept.contributors for p in sent)
    assert all(torch.equal(p.tensors["x"], kept.total["x"]) for p in sent)


def test_a_result_of_an_older_epoch_from_a_bypassed_leader_is_refused():
    net, _ = ring(4)
    new = View(2, (0, 2, 3), (0, 0, 0))  # 1 was bypassed
    member = net.cores[2]
    adopt(net, 2, new)
    member.receive(result_token(1, 1, (1, 2), sender=3))  # passed on by a live member
    assert member.lap_result(LAP, ROUND) is None


def test_a_token_for_a_round_nobody_runs_any_more_does_not_circle():
    net, _ = ring(3)
    for core in net.cores.values():
        core.progress.completed = 5  # round 1 is long done and forgotten everywhere
    header = LapHeader(LAP, leader=0, attempt=0, epoch=1, visited=(0,), contributors=(0,))
    net.cores[1].receive(Payload(0, ROUND, 1, 0, contribution(0), channel=Channel.LAP, lap=header))
    hops = 0
    while net.queue and hops < 30:
        net.step("deliver", 0)
        hops += 1
    assert not net.queue and hops <= 3  # once round at most
