"""Every exchange pattern on real Ray actors: ring laps (exact, fault-aware), dynamic
neighbour sets, and offer/decide pulls, all through the one client runtime."""

from __future__ import annotations

import time

import pyarrow.parquet as pq
import pytest
import ray
import torch

from ring_actors.delivery.payload_checks import tensor_bytes
from ring_actors.models import build_backbone
from ring_actors.runtime.driver import launch, shutdown, wait_and_finalize
from tests.conftest import needs_data, small_config

pytestmark = [needs_data, pytest.mark.slow]


def _lap_view(client, name: str, round_: int):
    """A client's stored lap result and its model, read inside the actor."""

    def read(actor, name, round_):
        result = actor.core.laps.result(name, round_)
        state = {k: v.detach().cpu() for k, v in actor.core.algorithm.model.state_dict().items()}
        return result, state, len(actor.core.data.train)

    return client.__ray_call__.remote(read, name, round_)


def _run(config, out, lap: str | None = None):
    """Run to the end; with ``lap``, also read each survivor's result of the last round's lap."""
    experiment = launch(config, out)
    try:
        started = time.monotonic()
        ray.get(experiment.coordinator.start_clients.remote())
        summary = wait_and_finalize(experiment, started, progress=False)
        last = config.experiment.rounds - 1
        views = {
            i: ray.get(_lap_view(c, lap, last))
            for i, c in experiment.clients.items()
            if lap and i in summary["ring_order"]
        }
    finally:
        shutdown(experiment)
    return summary, views


def test_the_engines_lap_gives_every_client_the_exact_sample_weighted_average(ray_local, tmp_path):
    """FedAvg's lap summed by the collective engine (gloo among the client actors): one
    group for the run's one epoch, no fallback, and every member ends on the exact average."""
    config = small_config(
        tmp_path, "algorithm.name=fedavg", "clients.count=4", "schedule.lap_engine=collective"
    )
    summary, views = _run(config, tmp_path / "out", lap="average")
    assert summary["rounds_completed"] == 3
    events = pq.read_table(tmp_path / "out" / "events.parquet").to_pylist()
    kinds = [e["kind"] for e in events]
    assert kinds.count("lap_group_formed") == 1, events
    assert "lap_engine_fallback" not in kinds
    # The engine's bytes go over gloo, counted as a ring all-reduce moves them: 2(N-1)/N of
    # the model per member and round, in 2(N-1) steps of one float32 buffer.
    rows = pq.read_table(tmp_path / "out" / "metrics.parquet").to_pylist()
    sent = [r["bytes_sent"] for r in rows if r["round"] == 0]
    assert len(sent) == 4 and len(set(sent)) == 1 and sent[0] > 0
    assert all(r["hops"] == 2 * (4 - 1) for r in rows)
    sizes = {i: n for i, (_, _, n) in views.items()}
    for result, state, _ in views.values():
        assert sorted(result.contributors) == [0, 1, 2, 3]
        assert float(result.total["#samples"]) == sum(sizes.values())
        for name, value in state.items():
            if value.is_floating_point():
                assert torch.allclose(value, result.total[name] / sum(sizes.values()))
    first = next(iter(views.values()))[1]
    for _, state, _ in views.values():  # everyone ends the lap on the same model
        assert all(torch.equal(state[k], first[k]) for k in state)
    assert summary["events"]["lost_payloads"] == 0
    assert summary["global_acc"]["mean"] > 0.3  # a shared model beats one client's classes


def test_ring_lap_survives_a_crash_and_counts_only_the_survivors(ray_local, tmp_path):
    config = small_config(
        tmp_path,
        "algorithm.name=fedavg",
        "clients.count=4",
        "experiment.rounds=4",
        "schedule.hop_timeout_s=6",
        "schedule.heartbeat_s=0.5",
        "faults=[{at_round: 2, crash: [2]}]",
    )
    out = tmp_path / "out"
    summary, views = _run(config, out, lap="average")
    assert summary["rounds_completed"] == 4
    assert summary["ring_order"] == [0, 1, 3]
    assert summary["events"]["lost_payloads"] == 0
    survivors = sum(n for _, _, n in views.values())
    for result, _, _ in views.values():
        assert sorted(result.contributors) == [0, 1, 3]
        assert float(result.total["#samples"]) == survivors
    events = pq.read_table(out / "events.parquet").to_pylist()
    assert not [e for e in events if e["kind"] == "lap_failed"]


def test_dynamic_topology_merges_from_degree_peers_and_accounts_bytes(ray_local, tmp_path):
    config = small_config(
        tmp_path,
        "clients.count=5",
        "clients.num_cpus=0.25",  # five clients on the fixture's two CPUs
        "topology.kind=dynamic",
        "topology.degree=2",
        "topology.resample_every=1",
    )
    out = tmp_path / "out"
    summary, _ = _run(config, out)
    assert summary["rounds_completed"] == 3
    rows = pq.read_table(out / "metrics.parquet").to_pylist()
    later = [r for r in rows if r["round"] > 0]
    assert later and all(r["merged"] == 2 for r in later)  # exactly `degree` peers each round
    # Five clients each listen to two: ten full-model hops per round, whoever sends them.
    per_round = {}
    for r in rows:
        per_round[r["round"]] = per_round.get(r["round"], 0) + r["bytes_sent"]
    model_bytes = summary["bytes_per_hop"]
    assert model_bytes == tensor_bytes(build_backbone("cnn", (1, 28, 28), 10).state_dict())
    for round_, sent in per_round.items():
        assert sent == pytest.approx(10 * model_bytes), round_
    assert summary["events"]["lost_payloads"] == 0


def test_offer_decide_pulls_only_what_the_method_asks_for(ray_local, tmp_path):
    """UA-PDFL with a zero threshold finds no peer similar: it pulls feature extractors
    from every sampled peer and no classifier, so a round costs less than full models."""
    config = small_config(
        tmp_path,
        "algorithm.name=ua_pdfl",
        "algorithm.threshold=0.0",
        "clients.count=4",
        "topology.kind=dynamic",
        "topology.degree=2",
    )
    out = tmp_path / "out"
    summary, _ = _run(config, out)
    assert summary["rounds_completed"] == 3
    assert summary["events"]["lost_payloads"] == 0
    rows = pq.read_table(out / "metrics.parquet").to_pylist()
    later = [r for r in rows if r["round"] > 0]
    assert later and all(r["merged"] == 2 for r in later)  # one pulled payload per peer
    assert all(r["dropout"] == 0 for r in later)
    full_model = sum(
        t.numel() * t.element_size()
        for t in build_backbone("cnn", (1, 28, 28), 10).state_dict().values()
        if t.is_floating_point()
    )
    per_round = sum(r["bytes_sent"] for r in later) / len(later)
    assert 0 < per_round < 2 * full_model  # features only, never two whole models
    events = pq.read_table(out / "events.parquet").to_pylist()
    assert not [e for e in events if e["kind"] in ("pull_failed", "payload_rejected")]
