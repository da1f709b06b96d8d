"""A small ring of the real cores in one process under a ``heterogeneity`` section (speeds,
links, off periods), and the events its coordinator recorded: what the heterogeneity and
straggler tests run."""

from __future__ import annotations

from ring_actors.config import config_from_dict
from ring_actors.in_process import InProcessRing
from tests.helpers.in_process_ring import CLASSES, SHAPE, client_data


def ring(tmp_path, heterogeneity, rounds=4, count=4, schedule=None, experiment=None, **extra):
    config = config_from_dict(
        {
            "experiment": {"name": "hetero", "rounds": rounds, **(experiment or {})},
            "clients": {"count": count, "batch_size": 16},
            "algorithm": {"name": "dfedavg"},
            "schedule": {"hop_timeout_s": 2.0, "heartbeat_s": 0.1, **(schedule or {})},
            "heterogeneity": heterogeneity,
            **extra,
        }
    )
    return InProcessRing(config, client_data(count), CLASSES, SHAPE, tmp_path)


def budgeted(tmp_path, heterogeneity, budget_s, **extra):
    """A ring that runs as many rounds as fit in ``budget_s`` wall seconds."""
    budget = {"time_budget_s": budget_s}
    return ring(tmp_path, heterogeneity, rounds=10_000, experiment=budget, **extra)


def events(run, kind):
    return [e for e in run.coordinator.results.events if e["kind"] == kind]
