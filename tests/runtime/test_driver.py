"""End-to-end rings of real Ray actors on real Fashion-MNIST, with a real MLflow store."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from dataclasses import replace

import pyarrow.parquet as pq
import pytest
import ray
import torch
import yaml
from mlflow.tracking import MlflowClient

from ring_actors.config import config_from_dict
from ring_actors.delivery.payload_checks import tensor_bytes
from ring_actors.delivery.payloads import Payload
from ring_actors.delivery.wire import to_wire
from ring_actors.models import build_backbone
from ring_actors.preflight.output_folder import RunFolderError
from ring_actors.runtime.driver import (
    Experiment,
    PlacementError,
    check_capacity,
    default_output_dir,
    launch,
    run_experiment,
    shutdown,
    wait_and_finalize,
)
from tests.conftest import LIGHT, TRACKED, needs_data, small_config

pytestmark = [needs_data, pytest.mark.slow]

SUMMARY_KEYS = {
    "algorithm",
    "dataset",
    "clients",
    "rounds_completed",
    "mode",
    "local_acc",
    "global_acc",
    "bytes_per_hop",
    "hops",
    "events",
    "wall_s",
    "samples_per_s",
    "mlflow",
}


def test_sync_drdfl_ring_learns_sends_its_shared_part_and_writes_the_output_contract(
    ray_local, tmp_path
):
    config = small_config(tmp_path, *TRACKED, "algorithm.name=drdfl", "algorithm.lr=0.001")
    out = tmp_path / "out"
    summary = run_experiment(config, out, progress=False)

    # Two classes per client: chance is 0.5 on Local-T, so 0.8 needs real learning.
    assert summary["rounds_completed"] == 3
    assert summary["local_acc"]["mean"] > 0.8
    assert set(summary["local_acc"]["per_client"]) == {"0", "1", "2", "3"}
    assert summary["events"] == {
        "crashes": 0,
        "hangs": 0,
        "errors": 0,
        "bypasses": 0,
        "joins": 0,
        "rejoins": 0,
        "lost_payloads": 0,
    }
    # Learngene plus class statistics: about 0.58 M float32 values, far below the whole model.
    model_bytes = tensor_bytes(build_backbone("cnn", (1, 28, 28), 10).state_dict())
    assert 0.5e6 * 4 < summary["bytes_per_hop"] < 0.65e6 * 4 < model_bytes
    assert summary["hops"] == 4 * 3

    assert set(json.loads((out / "summary.json").read_text())) >= SUMMARY_KEYS
    assert config_from_dict(yaml.safe_load((out / "config.yaml").read_text())) == config
    # the split it ran on, for another run to load (data.partition.kind: file)
    written = json.loads((out / "partition.json").read_text())["clients"]
    assert [len(c["train"]) for c in written] == [config.data.max_train_per_client] * 4
    metrics = pq.read_table(out / "metrics.parquet").to_pylist()
    assert sorted((r["client"], r["round"]) for r in metrics) == [
        (c, r) for c in range(4) for r in range(3)
    ]
    assert all(0 <= r["local_acc"] <= 1 and 0 <= r["global_acc"] <= 1 for r in metrics)
    # A client process with torch loaded holds well over 100 MB; its peak never falls.
    for c in range(4):
        peaks = [
            r["peak_rss_mb"] for r in sorted(metrics, key=lambda r: r["round"]) if r["client"] == c
        ]
        assert all(100 < p < 64_000 for p in peaks) and peaks == sorted(peaks)
    events = pq.read_table(out / "events.parquet")
    assert {"time_s", "kind", "client", "round", "epoch"} <= set(events.column_names)

    client = MlflowClient(summary["mlflow"]["tracking_uri"])
    run = client.get_run(summary["mlflow"]["run_id"])
    assert run.data.params["algorithm.name"] == "drdfl"
    assert run.data.tags["dataset"] == "fashion-mnist"
    means = client.get_metric_history(run.info.run_id, "local_acc_mean")
    assert sorted(m.step for m in means) == [0, 1, 2]
    final = [m.value for m in means if m.step == 2][0]
    assert final == pytest.approx(summary["local_acc"]["mean"])
    assert len(client.get_metric_history(run.info.run_id, "client_3/global_acc")) == 3
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"summary.json", "metrics.parquet", "events.parquet", "config.yaml"} <= artifacts
    # The run's own figures and its means at the end, named to be listed first.
    assert {"curves.png", "timeline.png"} <= artifacts
    assert (out / "curves.png").stat().st_size > 10_000
    logged = run.data.metrics
    assert logged["Local-T"] == pytest.approx(100 * summary["local_acc"]["mean"])
    assert logged["Global-T"] == pytest.approx(100 * summary["global_acc"]["mean"])
    assert logged["Bytes per hop"] == pytest.approx(summary["bytes_per_hop"])
    assert sorted(logged)[:3] == ["Bytes per hop", "Global-T", "Local-T"]

    # A second run into the same directory would resume this one's checkpoints: refused.
    with pytest.raises(RunFolderError, match="already holds a run"):
        run_experiment(config, out, progress=False)


def test_a_plug_in_methods_run_folder_has_a_portable_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = small_config(tmp_path, "algorithm.name=examples.fedprox:FedProx")
    name = default_output_dir(config).name
    assert name.startswith("test-examples.fedprox-FedProx-")
    assert re.fullmatch(r"[A-Za-z0-9._-]+", name), name


def test_default_output_dirs_never_collide(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = small_config(tmp_path)
    first = default_output_dir(config)
    first.mkdir(parents=True)
    second = default_output_dir(config)
    assert second != first and not second.exists()


def test_async_ring_finishes_with_a_straggler(ray_local, tmp_path):
    config = small_config(
        tmp_path,
        *LIGHT,
        "schedule.mode=async",
        "schedule.max_staleness=1",
        "experiment.rounds=3",
        "faults=[{at_round: 0, slow: [1], delay_s: 6.0}]",
    )
    summary = run_experiment(config, tmp_path / "out", progress=False)
    assert summary["rounds_completed"] == 3
    assert summary["events"]["lost_payloads"] == 0
    rows = pq.read_table(tmp_path / "out" / "metrics.parquet").to_pylist()
    reported = {(r["client"], r["round"]): r["time_s"] for r in rows}
    # Bounded staleness lets its successor finish round 2 before the straggler has finished
    # round 1, which a sync ring forbids. The straggler's 6 s sleep a round is the margin
    # against a loaded machine's slower training (2 s was not, in a loaded full suite).
    assert reported[2, 2] < reported[1, 1], reported


def test_clients_that_cannot_all_be_placed_fail_the_launch_and_leave_nothing(ray_local, tmp_path):
    # Five clients of 0.5 CPU on the fixture's two CPUs: one can never be placed.
    config = small_config(tmp_path, "clients.count=5", "clients.start_timeout_s=3")
    with pytest.raises(PlacementError, match=r"clients\.num_cpus=0\.5 = 2\.5 CPUs"):
        check_capacity(config)
    with pytest.raises(PlacementError, match="[1-5] of 5 client actors could not be placed"):
        launch(config, tmp_path / "out")
    assert not (tmp_path / "out").exists()  # a launch that never started leaves no folder
    deadline = time.monotonic() + 30
    while ray.available_resources().get("CPU", 0) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)  # the killed actors hand their CPUs back
    assert ray.available_resources().get("CPU", 0) == pytest.approx(2)


class TestPlacedClients:
    """What a launched ring's clients are before any round: where each was placed, and how
    its receiver treats what arrives. One launch answers both."""

    @pytest.fixture(scope="class")
    @classmethod
    def launched(cls, ray_local, tmp_path_factory) -> Iterator[Experiment]:
        tmp_path = tmp_path_factory.mktemp("placed")
        config = small_config(tmp_path, "clients.num_gpus=0.25", "clients.num_cpus=0.25")
        experiment = launch(config, tmp_path / "out")
        try:
            yield experiment
        finally:
            shutdown(experiment)

    def test_clients_take_fractional_gpus_and_fall_back_to_cpu(self, launched):
        for facts in launched.placement.values():
            assert facts.gpu_ids == ("0",)  # four clients share the one (logical) GPU
            expected = "cuda:0" if torch.cuda.is_available() else "cpu"
            assert facts.device == expected
            assert facts.torch_threads == 1
        available = ray.available_resources().get("GPU", 0.0)
        assert available == pytest.approx(0.0)

    def test_receiver_rejects_malformed_payloads_and_drops_duplicates(self, launched):
        client = launched.clients[1]
        state = dict(build_backbone("cnn", (1, 28, 28), 10).state_dict())
        good = Payload(0, 0, 0, 0, state, num_samples=10)
        poisoned = dict(state, **{"head.bias": torch.full((10,), float("nan"))})
        bad = Payload(0, 1, 0, 1, poisoned, num_samples=10)
        wrong_keys = Payload(0, 2, 0, 2, {"w": torch.ones(3)}, num_samples=10)
        assert ray.get(client.receive.remote(bad)) is False
        assert ray.get(client.receive.remote(wrong_keys)) is False
        assert ray.get(client.receive.remote("not a payload")) is False
        wire = to_wire(Payload(0, 3, 0, 3, state, num_samples=10))
        cut = replace(wire.tensors["head.bias"], data=wire.tensors["head.bias"].data[:-1])
        torn = replace(wire, tensors={**wire.tensors, "head.bias": cut})
        assert ray.get(client.receive.remote(torn)) is False  # bytes short of its shape
        assert ray.get(client.receive.remote(good)) is True
        assert ray.get(client.receive.remote(to_wire(good))) is True  # a re-send: acknowledged...
        stats = ray.get(client.stats.remote())
        assert stats["rejected"] == 4
        assert stats["inbox"] == 1  # ...but queued once, and the rejected ones not at all


def test_crashed_client_is_bypassed_and_nothing_is_lost(ray_local, tmp_path):
    config = small_config(
        tmp_path,
        *LIGHT,
        "experiment.rounds=5",
        "schedule.hop_timeout_s=10",
        "schedule.heartbeat_s=0.5",
    )
    experiment = launch(config, tmp_path / "out")
    try:
        started = time.monotonic()
        ray.get(experiment.coordinator.start_clients.remote())
        while ray.get(experiment.coordinator.progress.remote()).rounds_done < 6:
            time.sleep(0.2)
        ray.kill(experiment.clients[2], no_restart=True)
        summary = wait_and_finalize(experiment, started, progress=False)
    finally:
        shutdown(experiment)
    assert summary["ring_order"] == [0, 1, 3]
    assert summary["rounds_completed"] == 5
    assert summary["events"]["crashes"] == 1
    assert summary["events"]["bypasses"] == 1
    assert summary["events"]["lost_payloads"] == 0
    assert "2" in summary["local_acc"]["per_client"]  # the dead client's last metrics remain
    # Detected within the hop timeout of its last sign of life; healed once, after the bypass.
    (detection,) = summary["recovery"]["detection_s"]
    (heal,) = summary["recovery"]["heal_s"]
    assert 0 <= detection < 10 and heal > 0
    events = pq.read_table(tmp_path / "out" / "events.parquet").to_pylist()
    kinds = [e["kind"] for e in events]
    assert kinds.index("bypass") < kinds.index("healed")
    (healed,) = [e for e in events if e["kind"] == "healed"]
    (bypass,) = [e for e in events if e["kind"] == "bypass"]
    assert healed["time_s"] - bypass["time_s"] == pytest.approx(heal, abs=0.01)


def test_late_joiners_are_spliced_in_and_initialised_from_their_predecessor(ray_local, tmp_path):
    config = small_config(
        tmp_path, "clients.count=3", "experiment.rounds=5", "faults=[{at_round: 2, join: 1}]"
    )
    out = tmp_path / "out"
    experiment = launch(config, out)
    try:
        ray.get(experiment.coordinator.start_clients.remote())
        summary = wait_and_finalize(experiment, time.monotonic(), progress=False)
        progress = ray.get(experiment.coordinator.progress.remote())
    finally:
        shutdown(experiment)
    assert summary["events"]["joins"] == 1
    assert sorted(summary["ring_order"]) == [0, 1, 2, 3]
    assert summary["rounds_completed"] == 5
    events = pq.read_table(out / "events.parquet").to_pylist()
    assert [e["client"] for e in events if e["kind"] == "join_initialised"] == [3]
    rows = sorted(
        (r["round"], r["local_acc"])
        for r in pq.read_table(out / "metrics.parquet").to_pylist()
        if r["client"] == 3
    )
    assert rows[0][0] >= 2 and rows[-1][0] == 4
    assert rows[-1][1] > 0.8
    # Progress counts the rounds the joiner trained, not the ones it skipped by joining late.
    assert progress.rounds_done == progress.rounds_planned == 3 * 5 + len(rows)


def test_a_client_joined_mid_run_starts_at_a_round_the_ring_has_not_begun(ray_local, tmp_path):
    config = small_config(
        tmp_path,
        "clients.count=3",
        "clients.reserve=1",
        "experiment.rounds=6",
        "algorithm.name=fedavg",
    )
    out = tmp_path / "out"
    experiment = launch(config, out)
    try:
        started = time.monotonic()
        ray.get(experiment.coordinator.start_clients.remote())
        while ray.get(experiment.coordinator.progress.remote()).newest < 1:
            time.sleep(0.1)
        before = ray.get(experiment.coordinator.progress.remote()).newest
        (joiner,) = experiment.join(1)  # the driver API: no round asked for
        with pytest.raises(ValueError, match="clients.reserve"):
            experiment.join(1)  # the reserve of one is spent
        after = ray.get(experiment.coordinator.progress.remote()).newest
        summary = wait_and_finalize(experiment, started, progress=False)
    finally:
        shutdown(experiment)
    events = pq.read_table(out / "events.parquet").to_pylist()
    (join,) = [e for e in events if e["kind"] == "join"]
    assert join["client"] == joiner == 3
    assert before + 2 <= join["round"] <= after + 2
    # Every lap of the joiner's rounds went round the whole ring at the first attempt.
    laps = {"lap_failed", "lap_restarted", "lap_result_fetched"}
    assert not [e for e in events if e["kind"] in laps]
    assert summary["events"]["joins"] == 1 and summary["events"]["lost_payloads"] == 0
    rows = pq.read_table(out / "metrics.parquet").to_pylist()
    assert sorted(r["round"] for r in rows if r["client"] == 3) == list(range(join["round"], 6))


def test_async_drdfl_ring_learns_and_sends_only_its_shared_part(ray_local, tmp_path):
    """The sync ring's twin: ``test_sync_drdfl_ring_learns_sends_its_shared_part_and_...``."""
    config = small_config(
        tmp_path, "algorithm.name=drdfl", "algorithm.lr=0.001", "schedule.mode=async"
    )
    summary = run_experiment(config, tmp_path / "out", progress=False)
    assert summary["rounds_completed"] == 3
    assert summary["local_acc"]["mean"] > 0.8  # two classes per client: chance is 0.5
    assert summary["events"]["lost_payloads"] == 0
    # Learngene plus class statistics: about 0.58 M float32 values, far below the whole model.
    assert 0.5e6 * 4 < summary["bytes_per_hop"] < 0.65e6 * 4


def test_fault_plan_crash_and_hang_are_bypassed_and_the_hung_client_rejoins(ray_local, tmp_path):
    config = small_config(
        tmp_path,
        "experiment.rounds=9",
        "schedule.hop_timeout_s=4",
        "schedule.heartbeat_s=0.5",
        "faults=[{at_round: 2, crash: [1]}, {at_round: 2, hang: [3], for_s: 7}]",
    )
    out = tmp_path / "out"
    summary = run_experiment(config, out, progress=False)
    events = summary["events"]
    assert (events["crashes"], events["hangs"], events["bypasses"]) == (1, 1, 2)
    assert events["rejoins"] == 1
    assert events["lost_payloads"] == 0
    assert sorted(summary["ring_order"]) == [0, 2, 3]  # the crashed one stays out
    assert summary["rounds_completed"] == 9
    rows = pq.read_table(out / "metrics.parquet").to_pylist()
    assert max(r["round"] for r in rows if r["client"] == 3) == 8  # the hung one finished
    assert "1" in summary["local_acc"]["per_client"]  # what the crashed one reported stays


def test_a_method_that_shares_nothing_never_waits_for_peers(ray_local, tmp_path):
    config = small_config(
        tmp_path, *LIGHT, "algorithm.name=local", "clients.count=3", "schedule.hop_timeout_s=60"
    )
    summary = run_experiment(config, tmp_path / "out", progress=False)
    assert summary["rounds_completed"] == 3
    assert summary["hops"] == 0 and summary["bytes_per_hop"] == 0
    assert summary["wall_s"] < 60  # one wait for a payload that never comes would take 60 s
    events = pq.read_table(tmp_path / "out" / "events.parquet").to_pylist()
    assert not [e for e in events if e["kind"] == "wait_timeout"]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_method_that_raises_is_dropped_and_the_ring_heals(ray_local, tmp_path, mode, capsys):
    config = small_config(
        tmp_path,
        *LIGHT,
        "clients.count=3",
        "experiment.rounds=4",
        f"schedule.mode={mode}",
        "faults=[{at_round: 1, error: [1]}]",
    )
    summary = run_experiment(config, tmp_path / "out", progress=False)
    assert summary["stopped"] is None and summary["events"]["errors"] == 1
    assert summary["ring_order"] == [0, 2] and summary["rounds_completed"] == 4
    assert summary["events"]["lost_payloads"] == 0
    printed = capsys.readouterr().err
    assert "client 1 failed in round 1" in printed and "InjectedError" in printed
    assert "Traceback" not in printed  # one line; the traceback is in the run's folder
    assert "Traceback" in (tmp_path / "out" / "client_errors.log").read_text()


def test_a_method_that_raises_stops_the_run_when_asked(ray_local, tmp_path):
    config = small_config(
        tmp_path,
        *LIGHT,
        "clients.count=3",
        "experiment.rounds=20",
        "schedule.on_client_error=stop",
        "faults=[{at_round: 1, error: [0]}]",
    )
    started = time.monotonic()
    summary = run_experiment(config, tmp_path / "out", progress=False)
    assert "client 0 failed in round 1" in summary["stopped"]
    assert summary["rounds_completed"] < 20 and time.monotonic() - started < 120
    assert (tmp_path / "out" / "summary.json").exists()  # what exists is written
