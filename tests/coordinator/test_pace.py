"""Persistent stragglers and speeds, as the coordinator measures them from round reports."""

from __future__ import annotations

import pytest

from ring_actors.config import ConfigError, config_from_dict
from ring_actors.coordinator.pace import Pace, half_octave
from tests.helpers.scripted_clients import make


def report(core, client: int, round_: int, own_s: float, waited_s: float = 0.0) -> None:
    metrics = {"round_s": own_s + waited_s, "gather_wait_s": waited_s}
    core.report_round(client, round_, metrics)


def kinds(core, client: int) -> list[str]:
    return [e["kind"] for e in core.events if e["client"] == client and "straggler" in e["kind"]]


def test_the_rule_marks_the_slow_member_not_the_ones_that_waited_for_it():
    pace = Pace(factor=3.0, window=2, configured={})
    for _ in range(2):
        pace.record(0, {"round_s": 2.0, "gather_wait_s": 0.0})
        for fast in (1, 2, 3):  # paced by client 0: long rounds, nearly all waiting
            pace.record(fast, {"round_s": 2.1, "gather_wait_s": 2.0})
    assert pace.stragglers([0, 1, 2, 3], frozenset()) == {0}
    assert pace.ring_median_s([0, 1, 2, 3]) == pytest.approx(0.1)
    assert Pace(None, 2, {}).stragglers([0, 1], frozenset({0})) == frozenset()  # off


def test_a_member_keeps_its_mark_until_a_full_window_says_otherwise():
    pace = Pace(factor=3.0, window=3, configured={})
    for client in (0, 1, 2):
        pace.record(client, {"round_s": 1.0})
    assert pace.stragglers([0, 1, 2], frozenset({2})) == {2}  # nobody has a full window yet
    assert pace.stragglers([0, 1], frozenset({2})) == frozenset()  # gone from the ring


def test_a_straggler_is_marked_in_the_view_and_unmarked_when_it_speeds_up(tmp_path):
    core, handles = make(tmp_path, clients=4, straggler_factor=3.0, straggler_window=2)
    for round_ in range(2):
        for client in range(4):
            report(core, client, round_, 1.0 if client == 3 else 0.1)
    core.reconcile()
    assert kinds(core, 3) == ["straggler"]
    assert handles[0].views[-1].stragglers == (3,)
    marked = next(e for e in core.events if e["kind"] == "straggler")
    assert marked["own_s"] == pytest.approx(1.0) and marked["ring_s"] == pytest.approx(0.1)
    report(core, 3, 2, 0.1)
    core.reconcile()
    assert kinds(core, 3) == ["straggler"]  # the median of 1.0 and 0.1 is still slow
    report(core, 3, 3, 0.1)
    core.reconcile()
    assert kinds(core, 3) == ["straggler", "straggler_cleared"]
    assert handles[0].views[-1].stragglers == ()
    assert all(kinds(core, c) == [] for c in range(3))


def test_views_carry_configured_speeds_then_measured_ones_per_block(tmp_path):
    sections = {
        "topology": {"kind": "dynamic", "similarity": 2.0, "resample_every": 2},
        "heterogeneity": {"compute": {"factors": [1, 4, 1]}},
    }
    core, handles = make(tmp_path, clients=3, sections=sections)
    core.reconcile()
    assert handles[0].views[-1].speed_of() == {0: 1.0, 1: 4.0, 2: 1.0}
    for round_ in range(2):
        for client in range(3):
            report(core, client, round_, 0.5 if client == 1 else 0.125)
    core.reconcile()  # the newest round is 1: still block 0
    assert handles[0].views[-1].speed_of() == {0: 1.0, 1: 4.0, 2: 1.0}
    report(core, 0, 2, 0.125)
    core.reconcile()  # block 1: the measured speeds
    assert handles[0].views[-1].speed_of() == {0: 0.125, 1: 0.5, 2: 0.125}


def test_half_octaves_absorb_jitter():
    assert half_octave(1.0) == half_octave(1.1) == 1.0
    assert half_octave(2.0) == 2.0 and half_octave(0.0) == 0.0


@pytest.mark.parametrize(
    ("schedule", "key"),
    [
        ({"straggler_factor": 1.0}, "schedule.straggler_factor"),
        ({"straggler_factor": "fast"}, "schedule.straggler_factor"),
        ({"straggler_window": 0}, "schedule.straggler_window"),
    ],
)
def test_a_wrong_straggler_setting_names_its_key(schedule, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.") + ": must be"):
        config_from_dict({"schedule": schedule})


def test_a_negative_similarity_names_its_key():
    with pytest.raises(ConfigError, match=r"topology\.similarity: must be a number >= 0"):
        config_from_dict({"topology": {"kind": "dynamic", "similarity": -1}})
