"""The dry run shows the heterogeneity a run then applies: the same draws, client by client."""

from __future__ import annotations

import json
import re

from ring_actors.config import config_from_dict
from ring_actors.in_process import InProcessRing
from ring_actors.preflight.heterogeneity_plan import describe_heterogeneity
from tests.helpers.in_process_ring import CLASSES, SHAPE, client_data

DRAWN = {
    "compute": {"distribution": "lognormal", "spread": 1.2},
    "links": {"distribution": "lognormal", "latency_s": 0.03, "bandwidth_bytes_s": 3e6},
    "availability": {"mean_online_s": 40, "mean_offline_s": 8, "clients": [1, 2]},
}


def _config(heterogeneity, count=5, seed=7):
    return config_from_dict(
        {
            "experiment": {"name": "plan", "rounds": 2, "seed": seed},
            "clients": {"count": count},
            "algorithm": {"name": "dfedavg"},
            "heterogeneity": heterogeneity,
        }
    )


def test_the_speeds_and_links_shown_are_those_every_client_applies(tmp_path):
    config = _config(DRAWN)
    lines = describe_heterogeneity(config)
    speeds = next(line for line in lines if line.startswith("speeds:"))
    shown = {int(c): float(f) for c, f in re.findall(r"(\d+): (\d+\.\d+)", speeds)}
    ring = InProcessRing(config, client_data(5), CLASSES, SHAPE, tmp_path)
    try:
        for client in ring.clients.values():
            applied = client.core.hetero
            assert shown == {c: round(applied.speed_factor(c), 2) for c in range(5)}
            slowest = max(range(5), key=applied.speed_factor)
            assert f"slowest: client {slowest} at {applied.speed_factor(slowest):.2f}x" in speeds
            latencies = [applied.link(a, b)[0] for a in range(5) for b in range(5) if a != b]
            lo, hi = min(latencies) * 1e3, max(latencies) * 1e3
            links = next(line for line in lines if line.startswith("links:"))
            assert f"latency {lo:.1f}-{hi:.1f} ms" in links
    finally:
        ring.close()


def test_another_seed_shows_other_draws():
    assert describe_heterogeneity(_config(DRAWN, seed=7)) != describe_heterogeneity(
        _config(DRAWN, seed=8)
    )


def test_availability_names_the_clients_that_go_offline_and_their_share(tmp_path):
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps({"availability": {"0": [[1.0, 3.5], [10.0, 11.0]]}}))
    lines = describe_heterogeneity(_config({**DRAWN, "trace": str(trace)}))
    offline = next(line for line in lines if line.startswith("offline:"))
    assert "0: 3.5 s in 2 periods" in offline
    assert "clients 1, 2 offline 17% of the time" in offline


def test_a_uniform_run_shows_no_heterogeneity_lines():
    assert describe_heterogeneity(_config({})) == []
