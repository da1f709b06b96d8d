"""The collective engine under the ring's faults: members in threads of this process, each
with its own gloo group member, found through one in-memory rendezvous."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from ring_actors.client.collective_lap import CollectiveLaps
from ring_actors.delivery.event_kinds import EventKind
from ring_actors.delivery.rendezvous import LocalRendezvous
from ring_actors.delivery.view import View
from tests.helpers.in_process_ring import ring

DEADLINE_S = 2.0


class Member:
    """What the engine needs of its client: an id and a record of its events."""

    def __init__(self, client_id: int) -> None:
        self.id = client_id
        self.events: list[tuple[EventKind, int, str]] = []
        self.moved: list[tuple[int, int]] = []  # (bytes summed, members) per call

    def event(self, kind: EventKind, round_: int, detail: str = "", **measured: float) -> None:
        self.events.append((kind, round_, detail))

    def count_collective(self, nbytes: int, members: int) -> None:
        self.moved.append((nbytes, members))


def engines(count: int, rendezvous: LocalRendezvous) -> list[CollectiveLaps]:
    return [
        CollectiveLaps(Member(m), rendezvous, DEADLINE_S, silent_disagreement=False)
        for m in range(count)
    ]


def view(epoch: int, members: tuple[int, ...]) -> View:
    return View(epoch, members, tuple(0 for _ in members))


def laps_at_once(
    calls: dict[int, tuple[CollectiveLaps, View, dict]], rounds: dict[int, int] | None = None
) -> dict[int, object]:
    """Each member's ``run`` on its own thread, as the members' training threads call it
    (of round 1, or of the member's round in ``rounds``)."""
    results: dict[int, object] = {}

    def one(member: int) -> None:
        engine, seen, contribution = calls[member]
        round_ = (rounds or {}).get(member, 1)
        results[member] = engine.run("avg", round_, contribution, seen, time_left_s=60.0)

    threads = [threading.Thread(target=one, args=(m,)) for m in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=4 * DEADLINE_S)
    return results


def contribution(member: int) -> dict[str, torch.Tensor]:
    """Float32 weights and an int64 count: two segments, each summed by one call."""
    generator = torch.Generator().manual_seed(member)
    return {
        "w": torch.randn(3, 1000, generator=generator),
        "n": torch.tensor([member + 1], dtype=torch.int64),
    }


def test_every_member_gets_the_same_bits_equal_to_the_plain_sum():
    members = (0, 1, 2, 3)
    laps = engines(4, LocalRendezvous())
    for engine in laps:
        engine.on_view(view(1, members))
    results = laps_at_once({m: (laps[m], view(1, members), contribution(m)) for m in members})
    totals = [results[m] for m in members]
    assert all(t is not None for t in totals), totals
    for total in totals[1:]:
        assert torch.equal(total["w"], totals[0]["w"]) and torch.equal(total["n"], totals[0]["n"])
    plain = sum(contribution(m)["w"] for m in members)
    assert torch.allclose(totals[0]["w"], plain, rtol=1e-6, atol=1e-5)
    assert int(totals[0]["n"]) == 1 + 2 + 3 + 4
    formed = [e for e in laps[0].host.events if e[0] == EventKind.LAP_GROUP_FORMED]
    assert len(formed) == 1  # one group for the epoch, announced by its first member
    assert laps[0].host.moved == [(3 * 1000 * 4, 4), (8, 4)]  # each dtype's bytes, counted


def test_a_view_that_changes_pace_alone_keeps_the_group():
    """A straggler marked or speeds refreshed moves the epoch, not the members: the group
    formed for them goes on summing, and no second one forms."""
    members = (0, 1, 2)
    laps = engines(3, LocalRendezvous())
    for engine in laps:
        engine.on_view(view(1, members))
        engine.on_view(View(2, members, (0, 0, 0), stragglers=(2,), members_since=1))
    paced = View(2, members, (0, 0, 0), stragglers=(2,), members_since=1)
    results = laps_at_once({m: (laps[m], paced, contribution(m)) for m in members})
    assert all(results[m] is not None for m in members), results
    assert all(list(engine.groups) == [1] for engine in laps)
    formed = [e for e in laps[0].host.events if e[0] == EventKind.LAP_GROUP_FORMED]
    assert len(formed) == 1


def test_contributions_of_another_layout_never_enter_the_sum():
    members = (0, 1, 2)
    laps = engines(3, LocalRendezvous())
    for engine in laps:
        engine.on_view(view(1, members))
    odd = {"w": torch.ones(3, 999)}  # another shape: it would not fit anyone's total
    calls = {m: (laps[m], view(1, members), contribution(m)) for m in members}
    calls[2] = (laps[2], view(1, members), odd)
    results = laps_at_once(calls)
    assert results == {0: None, 1: None, 2: None}  # every member falls back, alike
    for engine in laps:
        kinds = [e[0] for e in engine.host.events]
        assert EventKind.LAP_ENGINE_FALLBACK in kinds
        assert (1, "avg") in engine.disagreed  # the ring lap for the rest of the epoch


def test_members_of_one_epoch_at_different_rounds_never_add_into_each_others_sums():
    """After a resume, a member whose checkpoint is a round older runs round 1 while the
    others run round 2 in the same epoch: no one's total mixes the two rounds. The members
    ahead take the ring lap for round 2, so does the one behind once it gets there, and the
    group sums round 3 for all."""
    members = (0, 1, 2)
    laps = engines(3, LocalRendezvous())
    for engine in laps:
        engine.on_view(view(1, members))
    calls = {m: (laps[m], view(1, members), contribution(m)) for m in members}
    assert laps_at_once(calls, rounds={0: 2, 1: 2, 2: 1}) == {0: None, 1: None, 2: None}
    started = time.monotonic()
    assert laps_at_once({2: calls[2]}, rounds={2: 2}) == {2: None}  # no call: the others
    assert time.monotonic() - started < DEADLINE_S / 2  # are in round 2's ring lap
    results = laps_at_once(calls, rounds=dict.fromkeys(members, 3))
    plain = sum(contribution(m)["w"] for m in members)
    for m in members:
        assert results[m] is not None and torch.allclose(results[m]["w"], plain, atol=1e-5)


def test_a_member_that_never_calls_ends_the_others_calls_at_the_deadline():
    """A hung member: the survivors' calls end within the deadline, and fall back."""
    members = (0, 1, 2)
    laps = engines(3, LocalRendezvous())
    for engine in laps:
        engine.on_view(view(1, members))
    for engine in laps:
        assert engine.groups[1].ready.wait(DEADLINE_S)
    started = time.monotonic()
    results = laps_at_once({m: (laps[m], view(1, members), contribution(m)) for m in (0, 1)})
    assert time.monotonic() - started < 2 * DEADLINE_S + 1.0
    assert results == {0: None, 1: None}
    assert all(laps[m].groups[1].broken for m in (0, 1))  # a gloo group is not reused


def test_a_member_of_a_stale_epoch_never_adds_into_the_next_epochs_sum():
    """Members 0 and 1 are at epoch 2 (with 2 in it), member 2 still acts on epoch 1: no
    call pairs across epochs, so nobody's total holds another epoch's contribution."""
    members = (0, 1, 2)
    laps = engines(3, LocalRendezvous())
    for engine in laps:
        engine.on_view(view(1, members))
    for m in (0, 1):
        laps[m].on_view(view(2, members))
    calls = {m: (laps[m], view(2, members), contribution(m)) for m in (0, 1)}
    calls[2] = (laps[2], view(1, members), contribution(2))
    assert laps_at_once(calls) == {0: None, 1: None, 2: None}


def test_a_group_whose_store_is_never_published_falls_back_with_one_event():
    """The first member never forms (its rendezvous refused): the others give up once."""
    laps = engines(3, LocalRendezvous())
    for m in (1, 2):
        laps[m].on_view(view(1, (0, 1, 2)))
    for m in (1, 2):
        assert laps[m].groups[1].ready.wait(2 * DEADLINE_S)
        assert laps[m].groups[1].broken
        fallbacks = [e for e in laps[m].host.events if e[0] == EventKind.LAP_ENGINE_FALLBACK]
        assert len(fallbacks) == 1 and "did not form" in fallbacks[0][2]
    assert laps[1].run("avg", 1, contribution(1), view(1, (0, 1, 2)), 60.0) is None


def test_a_round_that_cannot_wait_for_its_group_falls_back_with_one_event():
    """A member whose group is still forming when its round's time is up goes round the ring,
    says so in that round, and never enters the group later: its peers' calls that round
    found it absent and gave the group up."""
    laps = engines(2, LocalRendezvous())
    laps[1].on_view(view(1, (0, 1)))  # member 0 never forms: member 1 waits for its store
    started = time.monotonic()
    assert laps[1].run("avg", 1, contribution(1), view(1, (0, 1)), time_left_s=0.2) is None
    assert time.monotonic() - started < DEADLINE_S
    assert laps[1].groups[1].ready.wait(2 * DEADLINE_S)
    assert laps[1].run("avg", 2, contribution(1), view(1, (0, 1)), 60.0) is None
    fallbacks = [e for e in laps[1].host.events if e[0] == EventKind.LAP_ENGINE_FALLBACK]
    assert [(round_, "not formed" in detail) for _, round_, detail in fallbacks] == [(1, True)]


def ring_models(tmp_path, engine: str, faults=()) -> tuple[list[dict], dict, list[str]]:
    """The live members' models at the end, the summary, and the run's event kinds."""
    run = ring(
        tmp_path, algorithm="fedavg", rounds=4, lap_engine=engine, faults=faults,
        hop_timeout_s=3.0,  # a collective's deadline (two hops) covers the members' skew
    )  # fmt: skip
    summary = run.run(timeout_s=90)
    live = summary["ring_order"]
    kinds = [f"{e['kind']}: {e['detail']}" for e in run.coordinator.events]
    return [run.clients[c].core.algorithm.shared_state() for c in live], summary, kinds


def test_an_in_process_fedavg_ring_by_the_engine_matches_the_ring_lap(tmp_path):
    by_engine, summary, kinds = ring_models(tmp_path / "engine", "collective")
    by_ring, _, ring_kinds = ring_models(tmp_path / "ring", "ring")
    assert summary["rounds_completed"] == 4
    assert [k.split(":")[0] for k in kinds] == [EventKind.LAP_GROUP_FORMED], kinds
    assert not any(k.startswith(EventKind.LAP_GROUP_FORMED) for k in ring_kinds)
    for name, tensor in by_engine[0].items():
        assert all(torch.equal(tensor, other[name]) for other in by_engine[1:]), name
        assert torch.allclose(tensor, by_ring[0][name], rtol=1e-4, atol=1e-6), name


@pytest.mark.slow
def test_an_engine_ring_survives_a_crash_mid_run_with_every_survivor_on_one_total(tmp_path):
    crash = [{"at_round": 2, "crash": [1]}]
    survivors, summary, kinds = ring_models(tmp_path, "collective", crash)
    formed = [k for k in kinds if k.startswith(EventKind.LAP_GROUP_FORMED)]
    assert len(formed) >= 2 and "[0, 2, 3]" in formed[-1], kinds  # re-formed without 1
    assert summary["rounds_completed"] == 4 and summary["ring_order"] == [0, 2, 3]
    assert summary["events"]["lost_payloads"] == 0
    for name, tensor in survivors[0].items():
        assert all(torch.equal(tensor, s[name]) for s in survivors[1:]), name


def test_the_marks_of_epochs_whose_group_is_gone_are_forgotten():
    """A lap that fell back in epoch 1 takes the ring lap for the rest of that epoch only;
    once epoch 1's group is torn down, its marks go with it, however many epochs pass."""
    members = (0, 1, 2)
    laps = engines(3, LocalRendezvous())
    for engine in laps:
        engine.on_view(view(1, members))
    calls = {m: (laps[m], view(1, members), contribution(m)) for m in members}
    calls[2] = (laps[2], view(1, members), {"w": torch.ones(3, 999)})
    assert laps_at_once(calls) == {0: None, 1: None, 2: None}
    engine = laps[0]
    engine.ring_through[(1, "avg")] = 4
    assert (1, "avg") in engine.disagreed
    for epoch in range(2, 2 + 2 * 3):
        engine.on_view(view(epoch, (10, 0)))  # rank 1: it waits for a store, in vain
    assert sorted(engine.groups) == [6, 7]
    assert not engine.disagreed and not engine.ring_through
