"""The summary's figures from constructed facts whose answers are known by hand."""

from __future__ import annotations

import pytest

from ring_actors.config import config_from_dict
from ring_actors.coordinator.run_summary import RunFacts, round_means, summarise_run
from tests.helpers.scripted_clients import make


def facts(**changes) -> RunFacts:
    rows = [
        {"client": c, "round": r, "local_acc": 0.1 * r + c, "global_acc": 0.5}
        for r in range(12)
        for c in (0, 1)
    ]
    base = {
        "members": 3,
        "rounds_completed": 12,
        "ring_order": [0, 1],
        "rows": rows,
        "reports": [{"samples": 100.0, "bytes_sent": 2e6}, {"samples": 50.0, "bytes_sent": 0.0}],
        "done": [
            {"hops": 3, "bytes_sent": 300, "lost": 0},
            {"hops": 1, "bytes_sent": 100, "lost": 2},
        ],
        "events": [
            {"kind": "crash", "latency_s": 0.7},
            {"kind": "bypass"},
            {"kind": "healed", "latency_s": 3.0},
        ],
        "stop_reason": None,
        "finished": True,
        "mlflow": {"run_id": "r"},
    }
    return RunFacts(**(base | changes))


def test_accuracies_at_the_end_and_over_the_last_ten_evaluated_rounds():
    summary = summarise_run(config_from_dict({}), facts(), wall_s=10.0)
    assert summary["local_acc"]["per_client"] == {"0": pytest.approx(1.1), "1": pytest.approx(2.1)}
    assert summary["local_acc"]["mean"] == pytest.approx(1.6)
    assert summary["local_acc"]["std"] == pytest.approx(0.5)
    # rounds 2..11 of each client: 0.1 * 6.5 on average, plus the client's offset of 0 or 1
    assert summary["local_acc_last10"] == pytest.approx(0.65 + 0.5)
    assert summary["global_acc_last10"] == pytest.approx(0.5)


def test_traffic_faults_and_throughput():
    summary = summarise_run(config_from_dict({}), facts(), wall_s=10.0)
    assert summary["hops"] == 4 and summary["bytes_total"] == 400
    assert summary["bytes_per_hop"] == 100.0
    assert summary["mb_per_round_per_client"] == pytest.approx(1.0)
    assert summary["samples_per_s"] == pytest.approx(15.0)
    assert summary["events"]["crashes"] == 1 and summary["events"]["lost_payloads"] == 2
    assert summary["recovery"] == {"detection_s": [0.7], "heal_s": [3.0]}


def test_a_run_with_nothing_recorded_has_zeros_not_errors():
    empty = facts(rows=[], reports=[], done=[], events=[], rounds_completed=0)
    summary = summarise_run(config_from_dict({}), empty, wall_s=0.0)
    assert summary["local_acc"] == {"mean": 0.0, "std": 0.0, "per_client": {}}
    assert summary["bytes_per_hop"] == 0.0 and summary["samples_per_s"] == 0.0


def test_round_means_average_each_metric_over_clients():
    means = round_means([{"loss": 1.0, "acc": 0.5}, {"loss": 3.0}])
    assert means == {"loss_mean": 2.0, "acc_mean": 0.5}


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({}, "rounds"),
        ({"rounds_completed": 7}, "time_budget"),  # every member ended early: its budget
        ({"stop_reason": "no live client left"}, "stopped"),
        ({"stop_reason": "no live client left", "finished": False}, "stopped"),
        ({"rounds_completed": 7, "finished": False}, None),  # cut short: resumable
    ],
)
def test_the_summary_says_why_the_run_ended(changes, expected):
    config = config_from_dict({"experiment": {"rounds": 12, "time_budget_s": 60}})
    assert summarise_run(config, facts(**changes), wall_s=1.0)["ended_because"] == expected


def test_a_crashed_clients_traffic_is_in_the_summary(tmp_path):
    """Client 2 sent 300 bytes in one hop a round for two rounds, then crashed: its round
    reports (with the hops a round's metrics would carry) survive it, and the run's traffic
    must count them as it counts the finished clients'."""
    core, _ = make(tmp_path)
    for round_ in range(2):
        for client_id in (0, 1, 2):
            core.report_round(client_id, round_, {"bytes_sent": 300.0, "hops": 1.0})
    core.report_failed(2, 2, "RuntimeError: boom")
    for client_id in (0, 1):
        core.report_done(client_id, lost=0, hops=2, bytes_sent=600)
    summary = core.summary(wall_s=1.0)
    assert summary["bytes_total"] == 3 * 600 and summary["hops"] == 3 * 2
