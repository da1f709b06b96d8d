"""A restarted coordinator's run clock: the time it was down is the run's time when Ray
restarted it mid-run (its clients trained on), not when a stopped run is resumed later."""

from __future__ import annotations

import time

from ring_actors.coordinator.core import CoordinatorCore
from ring_actors.coordinator.tracking import Tracker
from tests.helpers.scripted_clients import make

DOWN_S = 1.0


def restarted_after_downtime(tmp_path, adopt_clients: bool) -> tuple[float, float]:
    """The run's clock as checkpointed, and as the coordinator restored after ``DOWN_S``."""
    core, handles = make(tmp_path)
    time.sleep(0.2)
    saved = core.run_elapsed_s()
    core.checkpoint(force=True)
    time.sleep(DOWN_S)
    restarted = CoordinatorCore(core.config, tmp_path, Tracker("unused", "t", "run"), handles.get)
    assert restarted.restore(adopt_clients=adopt_clients)
    return saved, restarted.run_elapsed_s()


def test_a_coordinator_restarted_mid_run_counts_its_downtime(tmp_path):
    """Clients' budgets and off periods run on this clock: losing the downtime would give
    every client that much more budget than the run's."""
    saved, restored = restarted_after_downtime(tmp_path, adopt_clients=True)
    assert restored >= saved + DOWN_S


def test_a_resumed_run_goes_on_from_where_its_clock_stopped(tmp_path):
    saved, restored = restarted_after_downtime(tmp_path, adopt_clients=False)
    assert saved <= restored < saved + DOWN_S / 2
