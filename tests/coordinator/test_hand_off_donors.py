"""A joiner's start does not depend on whether its donor's crash was noticed before the join:
a donor that leaves the ring before the joiner reported how it started is replaced by the
next one."""

from __future__ import annotations

import random
import time

from ring_actors.coordinator.membership import MembershipTable
from ring_actors.delivery.event_kinds import EventKind
from tests.helpers.in_process_ring import ring
from tests.helpers.scripted_clients import make


def until(core, done, timeout: float = 5.0) -> None:
    """Reconcile until ``done()``; fails the test if it never is."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "the coordinator never got there"
        core.reconcile()
        time.sleep(0.01)


def predecessor(order: list[int], client_id: int) -> int:
    return order[order.index(client_id) - 1]


def test_a_donor_bypassed_before_the_joiner_started_is_replaced_by_the_next(tmp_path):
    core, handles = make(tmp_path)
    for client_id in range(3):
        core.report_round(client_id, 0, {"loss": 1.0})
    donor = core.admit(3, handles[3], "node", first_round=2)
    assert handles[donor].handed_to == [3]
    handles[donor].state = "dead"  # it never handed anything over
    successor = predecessor(core.table.order, donor)
    until(core, lambda: handles[successor].handed_to == [3])
    # The joiner reported how it started: a later bypass asks nobody for anything.
    core.report_event(EventKind.JOIN_INITIALISED, 3, 1, f"from {successor}")
    handles[successor].state = "dead"
    until(core, lambda: not core.table.is_live(successor))
    for _ in range(5):
        core.reconcile()
    assert [c for c, h in handles.items() if h.handed_to] == sorted([donor, successor])
    assert handles[successor].handed_to == [3]


def test_a_restarted_coordinator_still_knows_who_waits_for_a_hand_off():
    table = MembershipTable()
    for client_id in range(3):
        table.add(client_id)
    table.seen(1, 0)
    table.add(3, after=1, first_round=2)
    assert table.await_hand_off(3) == 1
    restored = MembershipTable.from_record(table.to_record())
    assert restored.hand_offs == {3: 1}
    older = {k: v for k, v in table.to_record().items() if k != "hand_offs"}
    assert MembershipTable.from_record(older).hand_offs == {}


def test_a_joiner_whose_donor_crashed_unnoticed_starts_from_the_next_donor(tmp_path):
    """The donor dies right before the join is admitted, before any probe could notice:
    the joiner is still handed its start, by the donor's own nearest live predecessor."""
    run = ring(tmp_path, count=3, reserve=1, rounds=8, hop_timeout_s=1.0)
    core = run.coordinator
    placed_after = random.Random(run.config.experiment.seed * 7919 + 3).choice([0, 1, 2])
    run.start()
    try:
        deadline = time.monotonic() + 30
        while core.progress().round < 1:  # every member trained: each could be a donor
            assert time.monotonic() < deadline, "the ring never finished round 0"
            time.sleep(0.01)
        with core.lock:  # no probe runs between the crash and the admission
            run.kill(placed_after)
            run.join(1)
            assert predecessor(core.table.order, 3) == placed_after
            assert core.table.is_live(placed_after)  # not noticed yet
            expected = predecessor(core.table.order, placed_after)
        run.wait(timeout_s=60)
    finally:
        run.close()
    starts = [
        e
        for e in core.events
        if e["client"] == 3
        and e["kind"] in (EventKind.JOIN_INITIALISED, EventKind.JOIN_WITHOUT_HAND_OFF)
    ]
    assert [e["kind"] for e in starts] == [EventKind.JOIN_INITIALISED.value]
    assert starts[0]["detail"].endswith(f"from {expected}")
    assert run.clients[3].core.completed == 7
