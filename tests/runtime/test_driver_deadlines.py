"""No run waits forever: a run whose last live client dies, or whose coordinator never
comes back, ends with the reason and a non-zero exit."""

from __future__ import annotations

import time

import pytest
import ray
import yaml

from jobs.train import main as train_main
from ring_actors.runtime.driver import launch, shutdown
from ring_actors.runtime.follow import CoordinatorLost, wait_and_finalize
from tests.conftest import LIGHT, needs_data, small_config

pytestmark = [needs_data, pytest.mark.slow]


def test_a_run_whose_clients_all_crash_ends_with_the_reason_and_exit_1(ray_local, tmp_path, capsys):
    config = small_config(
        tmp_path,
        *LIGHT,
        "clients.count=3",
        "experiment.rounds=6",
        "schedule.hop_timeout_s=4",
        "schedule.heartbeat_s=0.5",
        "faults=[{at_round: 2, crash: [0, 1, 2]}]",
    )
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config.to_dict()))
    started = time.monotonic()
    code = train_main(
        ["--config", str(path), "--output-dir", str(tmp_path / "out"), "--no-progress"]
    )
    assert code == 1  # waited until killed before
    assert time.monotonic() - started < 300  # launch and MLflow included, on a busy machine
    assert "no live client left" in capsys.readouterr().err


def test_a_coordinator_that_never_comes_back_ends_the_run_within_its_bound(ray_local, tmp_path):
    config = small_config(
        tmp_path, *LIGHT, "clients.count=3", "experiment.rounds=50", "schedule.hop_timeout_s=1"
    )
    experiment = launch(config, tmp_path / "out")
    try:
        started = time.monotonic()
        ray.get(experiment.coordinator.start_clients.remote())
        ray.kill(experiment.coordinator, no_restart=True)  # as if its node were gone
        with pytest.raises(CoordinatorLost, match="has not answered"):
            wait_and_finalize(experiment, started, progress=False)
        # 10 hop timeouts, then one more try at most
        assert time.monotonic() - started < 10 * 1 + 2 * 1 + 5
    finally:
        shutdown(experiment)
