"""A launch that rides out failed client starts: real Ray actors whose constructors raise
through the fault plan's ``fail_start`` entry, on real Fashion-MNIST."""

from __future__ import annotations

import time

import pytest
import ray
import yaml

from jobs.train import main
from ring_actors.config import ConfigError
from ring_actors.runtime.client_starts import LaunchError, Started, settle
from ring_actors.runtime.driver import run_experiment
from tests.conftest import needs_data, small_config


def test_settle_drops_only_starting_members_and_keeps_a_ring():
    started = Started(failures={2: "boom"})
    assert settle(started, {0, 1, 2, 3}, "drop", resume=False) == {2}
    with pytest.raises(LaunchError, match=r"client 2: boom.*on_launch_failure=stop"):
        settle(started, {0, 1, 2, 3}, "stop", resume=False)
    with pytest.raises(LaunchError, match="resumed run needs every member"):
        settle(started, {0, 1, 2, 3}, "drop", resume=True)
    with pytest.raises(LaunchError, match="standby clients"):
        settle(started, {0, 1}, "drop", resume=False)
    with pytest.raises(LaunchError, match="only 1 clients would be left"):
        settle(Started(failures={0: "x", 1: "y"}), {0, 1, 2}, "drop", resume=False)
    assert settle(Started(), {0, 1}, "stop", resume=False) == set()


def test_bad_policy_and_fail_start_entries_name_the_key(tmp_path):
    with pytest.raises(ConfigError, match=r"clients.on_launch_failure.*'stop', 'drop'"):
        small_config(tmp_path, "clients.on_launch_failure=skip")
    with pytest.raises(ConfigError, match=r"faults\[\].at_round: must be 0 for fail_start"):
        small_config(tmp_path, "faults=[{at_round: 1, fail_start: [1]}]")
    with pytest.raises(ConfigError, match=r"faults\[\].fail_start: must be client ids"):
        small_config(tmp_path, "faults=[{at_round: 0, fail_start: [7]}]")


@needs_data
@pytest.mark.slow
def test_a_failed_start_is_retried_and_one_that_keeps_failing_is_dropped(ray_local, tmp_path):
    # Client 1's constructor raises once, client 2's every time (more than the retries).
    config = small_config(
        tmp_path,
        "experiment.rounds=2",
        "clients.on_launch_failure=drop",
        "faults=[{at_round: 0, fail_start: [1], times: 1},"
        " {at_round: 0, fail_start: [2], times: 9}]",
    )
    out = tmp_path / "out"
    summary = run_experiment(config, out, progress=False)
    assert summary["rounds_completed"] == 2
    assert set(summary["local_acc"]["per_client"]) == {"0", "1", "3"}
    assert summary["events"]["lost_payloads"] == 0
    assert (out / "clients" / "client-1.failed-starts").read_text() == "1"
    assert (out / "clients" / "client-2.failed-starts").read_text() == "3"  # every attempt


@needs_data
@pytest.mark.slow
def test_a_start_that_keeps_failing_stops_the_launch_by_name(ray_local, tmp_path, capsys):
    config = small_config(
        tmp_path, "clients.count=3", "faults=[{at_round: 0, fail_start: [2], times: 9}]"
    )
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config.to_dict()))
    code = main(["--config", str(path), "--no-progress", "--output-dir", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 3
    assert "client 2: " in err and "injected start failure 3 of 9" in err
    assert "clients.on_launch_failure=stop" in err
    assert "Traceback" not in err
    deadline = time.monotonic() + 30
    while ray.available_resources().get("CPU", 0) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)  # nothing of the launch stays on the cluster
    assert ray.available_resources().get("CPU", 0) == pytest.approx(2)
