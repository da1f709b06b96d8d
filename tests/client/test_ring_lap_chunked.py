"""The chunked lap (the ring all-reduce) on real client cores joined by a scheduled network:
what each member sends, when a lap keeps its single token, and what it refuses to combine."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from ring_actors.client.chunk_layout import add_part, cut, flatten, layout_of
from ring_actors.client.chunked_lap import CHUNK_MIN_BYTES
from ring_actors.config import config_from_dict
from ring_actors.delivery.event_kinds import EventKind
from ring_actors.delivery.payloads import Channel, LapHeader, Payload
from tests.helpers.lap_sums import LAP, ROUND
from tests.helpers.scheduled_network import CONFIG, Net, give_up_after, ring

Parts = dict[str, torch.Tensor]


def run_lap(net: Net, parts: dict[int, Parts], limit_s: float = 10.0) -> tuple[dict, list]:
    """Every member runs the lap on its thread over a fair network; what each ended with,
    and every message delivered, in order."""
    results: dict[int, object] = {}
    threads = {
        m: threading.Thread(
            target=lambda m=m: results.__setitem__(m, net.cores[m].laps.run(LAP, ROUND, parts[m])),
            daemon=True,
        )
        for m in parts
    }
    for thread in threads.values():
        thread.start()
    delivered: list[Payload] = []
    deadline = time.monotonic() + limit_s
    while any(t.is_alive() for t in threads.values()) or net.queue:
        assert time.monotonic() < deadline, "the lap never ended"
        with net.lock:
            head = net.queue[0][1] if net.queue else None
        if head is not None:
            delivered.append(head)
        net.step("deliver", 0)
        time.sleep(0.001)
    return results, delivered


LARGE = CHUNK_MIN_BYTES // 40 + 1  # rows of ``weights`` just over the threshold


def weights(member: int, rows: int) -> Parts:
    """A model's worth of float32 values (``w``, 2-D) and its sample count, weighted."""
    return {"w": torch.full((rows, 10), float(2**member)), "n": torch.tensor(float(2**member))}


def test_a_large_lap_goes_in_chunks_each_member_sending_2_n_minus_1_nths_of_it():
    """The all-reduce bound: each member sends 2(N-1) messages of M/N bytes, where the
    single token made one member send 2M and the lap take 2(N-1) whole-model hops in turn."""
    members = 4
    net, _ = ring(members)
    parts = {m: weights(m, LARGE) for m in range(members)}
    results, delivered = run_lap(net, parts)
    model = sum(v.numel() * v.element_size() for v in parts[0].values())
    for m in range(members):
        sent = [p for p in delivered if p.sender == m]
        assert len(sent) == 2 * (members - 1)
        assert all(p.lap.chunk >= 0 for p in sent)
        assert max(p.nbytes for p in sent) <= model / members + 8
        assert sum(p.nbytes for p in sent) <= 2 * (members - 1) / members * model + 64
    totals = {m: r.total for m, r in results.items()}
    for m, result in results.items():
        assert result.contributors == (0, 1, 2, 3)
        assert torch.equal(result.total["w"], torch.full((LARGE, 10), 15.0))
        assert float(result.total["n"]) == 15.0
        assert all(torch.equal(totals[m][k], totals[0][k]) for k in totals[0])
        assert result.total["w"].device.type == "cpu"  # kept as a token's is, for checkpoints


@pytest.mark.parametrize(("members", "rows"), [(4, 10), (2, LARGE)])
def test_a_small_lap_or_a_ring_of_two_keeps_the_single_token(members, rows):
    net, _ = ring(members)
    results, delivered = run_lap(net, {m: weights(m, rows) for m in range(members)})
    assert delivered and all(p.lap.chunk == -1 for p in delivered)
    assert all(sorted(r.contributors) == list(range(members)) for r in results.values())
    assert {float(r.total["n"]) for r in results.values()} == {float(2**members - 1)}


@pytest.mark.parametrize(
    ("policy", "cores", "chunked"),
    [("auto", 4, True), ("auto", 3, False), ("auto", 64, True), ("never", 64, False),
     ("always", 1, True)],
)  # fmt: skip
def test_a_lap_goes_in_chunks_only_among_members_that_step_at_once(policy, cores, chunked):
    """``auto``: chunks while the members are no more than the cores, one token past them
    (their N-fold calls would share the cores); ``always`` and ``never`` as they say."""
    schedule = {**CONFIG.to_dict()["schedule"], "chunked_laps": policy}
    config = config_from_dict({**CONFIG.to_dict(), "schedule": schedule})
    net, _ = ring(4, config, cores=cores)
    results, delivered = run_lap(net, {m: weights(m, LARGE) for m in range(4)})
    assert delivered and all((p.lap.chunk >= 0) == chunked for p in delivered)
    assert {float(r.total["n"]) for r in results.values()} == {15.0}


def test_the_leaders_choice_wins_when_members_sit_on_both_sides_of_the_threshold():
    """A leader with little to add sends one token; the members that started chunks of
    their own join it, and their chunks, which the leader ignores, never finish."""
    net, _ = ring(4)  # round 1's leader is member 1
    parts = {m: weights(m, LARGE) for m in (0, 2, 3)}
    parts[1] = {"n": torch.tensor(2.0)}  # a count only
    results, delivered = run_lap(net, parts)
    assert any(p.lap.chunk >= 0 for p in delivered)  # chunks were started
    assert all(r.contributors == (1, 2, 3, 0) for r in results.values())  # the token's order
    assert {float(r.total["n"]) for r in results.values()} == {15.0}
    assert len({float(r.total["w"].sum()) for r in results.values()}) == 1


def test_a_member_with_nothing_to_add_is_carried_by_the_chunks_and_left_out():
    net, _ = ring(4)
    for core in net.cores.values():
        core.laps.chunk_min_bytes = 0
    parts: dict[int, Parts] = {m: {f"sig/{m}": torch.full((2, 5), float(m))} for m in (0, 1, 3)}
    parts[2] = {}  # takes part without contributing
    results, delivered = run_lap(net, parts)
    assert all(p.lap.chunk >= 0 for p in delivered)
    for result in results.values():  # disjoint keys: an all-gather, each in its own shape
        assert result.contributors == (0, 1, 3)
        assert sorted(result.total) == ["sig/0", "sig/1", "sig/3"]
        assert all(torch.equal(result.total[f"sig/{m}"], parts[m][f"sig/{m}"]) for m in (0, 1, 3))


def forged_gather(contributors: tuple[int, ...]) -> Payload:
    """Member 0's all-gather message of attempt 0 to member 1 (chunk 1, step 2 of a ring
    of three), carrying a sum over ``contributors``."""
    value = float(sum(2**c for c in contributors))
    layout = layout_of({"x": torch.zeros(6)})
    header = LapHeader(
        LAP, 1, 0, 1, contributors=contributors, chunk=1, step=2, shapes=layout.shapes
    )
    tensors = {name: torch.full((2,), value) for name in layout.segments}
    return Payload(0, ROUND, 1, 3 * 2**32, tensors, channel=Channel.LAP, lap=header)


def test_chunks_of_another_contributor_set_are_never_combined():
    """A finished chunk that leaves a member out (here forged) is refused with the rest of
    its attempt; the leader's next attempt, or the total another member holds, ends the
    lap with one exact total everywhere."""
    net, _ = ring(3)  # round 1's leader is member 1
    for core in net.cores.values():
        core.laps.chunk_min_bytes = 0
    assert net.cores[1].receive(forged_gather((0, 2)))
    parts = {m: {"x": torch.full((6,), float(2**m))} for m in range(3)}
    results, _ = run_lap(net, parts)
    for result in results.values():
        assert result.contributors == (0, 1, 2)
        assert torch.equal(result.total["x"], torch.full((6,), 7.0))
    refused = [e for e in net.cores[1].control.events if e[0] == EventKind.LAP_TOKEN_REFUSED]
    assert refused and "disagree" in refused[0][2]


def test_a_part_of_another_shape_is_refused_not_added():
    """Same size, other shape: adding the flat pieces would pass silently."""
    net, _ = ring(3)
    for core in net.cores.values():
        core.laps.chunk_min_bytes = 0
        give_up_after(core, 1.0)
    parts = {m: {"x": torch.full((2, 3), 1.0)} for m in range(3)}
    parts[2] = {"x": torch.full((3, 2), 1.0)}
    results, _ = run_lap(net, parts)
    assert all(r is None for r in results.values())  # nobody ends with a mixed total
    events = [e for core in net.cores.values() for e in core.control.events]
    assert any(e[0] == EventKind.LAP_TOKEN_REFUSED and "(3, 2)" in e[2] for e in events)


def test_a_member_adds_into_a_chunk_on_the_device_that_holds_its_part():
    """On a GPU client the received chunk comes to the state, not the state to the host
    (the meta device stands in for an accelerator here)."""
    contribution = {"w": torch.empty((4, 3), device="meta")}
    layout = layout_of(contribution)
    mine = cut(flatten(contribution, layout), layout, 3)[1]
    (name,) = mine
    total = add_part({name: torch.ones(4)}, mine)
    assert total[name].device.type == "meta" and total[name].shape == (4,)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_gpu_members_chunks_are_summed_on_its_gpu_and_the_total_is_exact():
    net, _ = ring(3)
    for core in net.cores.values():
        core.laps.chunk_min_bytes = 0
    parts = {m: {"x": torch.full((9,), float(2**m), device="cuda")} for m in range(3)}
    results, delivered = run_lap(net, parts)
    added = [t for p in delivered if p.lap.step > 0 for t in p.tensors.values()]
    assert any(t.device.type == "cuda" for t in added)
    for result in results.values():
        assert torch.equal(result.total["x"], torch.full((9,), 7.0))


def test_results_of_chunked_laps_are_forgotten_with_their_answers():
    net, _ = ring(3)
    for core in net.cores.values():
        core.laps.chunk_min_bytes = 0
    run_lap(net, {m: {"x": torch.full((6,), float(2**m))} for m in range(3)})
    laps = net.cores[0].laps
    assert laps.finished_by[(LAP, ROUND)] == (1, 1, 0)  # leader, epoch, attempt
    saved = laps.kept()
    laps.forget_before(ROUND + 1)
    assert not laps.results and not laps.finished_by and not laps.answered
    laps.restore(saved)
    assert torch.equal(laps.result(LAP, ROUND).total["x"], torch.full((6,), 7.0))


def many_tensors(member: int) -> Parts:
    """A model's state in many tensors of three dtypes (weights, a double, counters)."""
    value = 2**member
    parts = {f"layer{i}.weight": torch.full((i + 1, 7), float(value)) for i in range(12)}
    parts["big"] = torch.full((LARGE, 10), float(value))
    parts["double"] = torch.full((5, 3), float(value), dtype=torch.float64)
    parts["steps"] = torch.full((3,), value, dtype=torch.int64)
    parts["count"] = torch.tensor(float(value))
    return parts


def test_a_chunk_carries_one_tensor_per_dtype_however_many_tensors_the_model_has():
    """Cut from one flat buffer per dtype: a chunk is added, checked and sent as three
    tensors here, not sixteen, and the total comes back in every tensor's shape and dtype."""
    members = 4
    net, _ = ring(members)
    parts = {m: many_tensors(m) for m in range(members)}
    results, delivered = run_lap(net, parts)
    chunks = [p for p in delivered if p.lap.chunk >= 0]
    assert len(chunks) == members * 2 * (members - 1)
    for chunk in chunks:
        assert sorted(str(t.dtype) for t in chunk.tensors.values()) == [
            "torch.float32",
            "torch.float64",
            "torch.int64",
        ]
        assert all(t.dim() == 1 for t in chunk.tensors.values())
    for result in results.values():
        assert result.contributors == (0, 1, 2, 3)
        assert result.total.keys() == parts[0].keys()
        for key, value in parts[0].items():
            expected = torch.full_like(value, 15)
            assert result.total[key].dtype == value.dtype, key
            assert torch.equal(result.total[key], expected), key


def test_members_whose_layouts_differ_are_summed_where_keys_meet_and_gathered_elsewhere():
    """Each layout travels as segments of its own: ``x``, which three members hold, is
    their sum; ``y`` and ``z`` are their one contributor's; one total everywhere."""
    net, _ = ring(4)
    for core in net.cores.values():
        core.laps.chunk_min_bytes = 0
    x = {m: torch.full((4, 3), float(2**m)) for m in range(3)}
    parts: dict[int, Parts] = {
        0: {"x": x[0], "y": torch.arange(5.0)},
        1: {"x": x[1]},
        2: {"x": x[2], "z": torch.full((2,), 4.0, dtype=torch.float64)},
        3: {},
    }
    results, delivered = run_lap(net, parts)
    assert all(p.lap.chunk >= 0 for p in delivered)
    for result in results.values():
        assert result.contributors == (0, 1, 2)
        assert torch.equal(result.total["x"], torch.full((4, 3), 7.0))
        assert torch.equal(result.total["y"], torch.arange(5.0))
        assert torch.equal(result.total["z"], torch.full((2,), 4.0, dtype=torch.float64))


def test_a_part_of_another_dtype_is_refused_not_added():
    net, _ = ring(3)
    for core in net.cores.values():
        core.laps.chunk_min_bytes = 0
        give_up_after(core, 1.0)
    parts = {m: {"x": torch.full((2, 3), 1.0)} for m in range(3)}
    parts[2] = {"x": torch.full((2, 3), 1.0, dtype=torch.float64)}
    results, _ = run_lap(net, parts)
    assert all(r is None for r in results.values())
    events = [e for core in net.cores.values() for e in core.control.events]
    assert any(e[0] == EventKind.LAP_TOKEN_REFUSED and "float64" in e[2] for e in events)


@pytest.mark.parametrize("chunked", [False, True])
def test_a_lap_gives_up_when_the_run_s_time_budget_ends(chunked):
    """A member that saw the budget end before the round never joins its lap: the others
    give up at the budget's end, not a give-up timeout later (minutes past the run's end)."""
    config = config_from_dict(
        {
            **CONFIG.to_dict(),
            "experiment": {"time_budget_s": 1.0},
            "schedule": {**CONFIG.to_dict()["schedule"], "hop_timeout_s": 30},
        }
    )
    net, _ = ring(3, config, chunked=chunked)
    parts = {m: weights(m, 4) for m in (0, 1)}  # member 2's budget ended before the round
    results, _ = run_lap(net, parts, limit_s=20.0)  # a give-up timeout is 180 s here
    assert results == {0: None, 1: None}
    failed = [
        e for m in (0, 1) for e in net.cores[m].control.events if e[0] == EventKind.LAP_FAILED
    ]
    assert len(failed) == 2 and all("time budget ended" in e[2] for e in failed)
