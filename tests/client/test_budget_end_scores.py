"""A client whose time budget ends while it is offline or gathering is scored on its final
model: its accuracy at the end of the budget is not its last scheduled evaluation's."""

from __future__ import annotations

import json

import torch

from ring_actors.client.core import ClientCore
from ring_actors.client.method_factory import build_algorithm
from ring_actors.client.resources import ClientData
from ring_actors.config import config_from_dict
from ring_actors.delivery.view import View
from ring_actors.in_process import InProcessRing
from tests.helpers.client_links import SHAPE, Peer, Reports
from tests.helpers.in_process_ring import CLASSES, client_data
from tests.helpers.in_process_ring import SHAPE as RING_SHAPE
from tests.helpers.synthetic import separable

UNSCHEDULED = {"every": 10_000}  # no evaluation by round: only the budget's end scores


def test_a_client_offline_when_its_budget_ends_is_scored_on_its_final_model(tmp_path):
    """Client 0 leaves after its first rounds and is still away when the budget ends."""
    trace = tmp_path / "availability.json"
    trace.write_text(json.dumps({"availability": {"0": [[0.3, 100.0]]}}))
    config = config_from_dict(
        {
            "experiment": {"name": "budget-end", "rounds": 10_000, "time_budget_s": 1.5},
            "clients": {"count": 2, "batch_size": 16},
            "algorithm": {"name": "dfedavg"},
            "schedule": {"hop_timeout_s": 2.0, "heartbeat_s": 0.1},
            "heterogeneity": {"trace": str(trace)},
            "eval": UNSCHEDULED,
        }
    )
    run = InProcessRing(config, client_data(2), CLASSES, RING_SHAPE, tmp_path)
    run.run(timeout_s=60)
    results = run.coordinator.results
    assert [e["client"] for e in results.events if e["kind"] == "offline"] == [0]
    for client in (0, 1):
        last = run.clients[client].core.completed
        rows = [r for r in results.rows if r["client"] == client]
        assert [r["round"] for r in rows] == [last], client  # its final model, scored once
        assert results.by_round[last][client]["local_acc"] == rows[0]["local_acc"]
        journal = [e for e in run.clients[client].core.journal() if e["kind"] == "round"]
        assert [e["round"] for e in journal] == list(range(last + 1))  # no round twice
        assert "local_acc" in journal[-1]["metrics"]
    reported = sum(run.clients[c].core.completed + 1 for c in (0, 1))
    assert len(results.reports()) == reported  # each round counted once


def test_a_client_whose_budget_ends_while_it_gathers_reports_its_last_rounds_scores():
    """Round 1 waits for a peer that never pushes until the budget ends: round 0's model,
    never evaluated, is scored and reported again as round 0 with its scores."""
    config = config_from_dict(
        {
            "experiment": {"rounds": 100, "time_budget_s": 2.0},
            "clients": {"count": 2},
            "algorithm": {"name": "dfedavg"},
            "schedule": {"mode": "sync", "hop_timeout_s": 30},
            "eval": UNSCHEDULED,
        }
    )
    data = separable(32, 4, SHAPE)
    method = build_algorithm(config, 0, 4, SHAPE, torch.device("cpu"))
    client = ClientCore(0, config, method, ClientData(data, data, data), Reports())
    client.set_view(View(1, (0, 1), (0, 0)), {1: Peer()})
    client.start()
    assert client.thread is not None
    client.thread.join(30)
    first, final = client.control.rounds
    assert "local_acc" not in first and "local_acc" in final
    assert final.items() >= first.items()  # the same round, with its scores added
    (entry,) = [e for e in client.journal() if e["kind"] == "round"]
    assert entry["round"] == 0 and entry["metrics"] == final
