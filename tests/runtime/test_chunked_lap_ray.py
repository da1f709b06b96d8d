"""The chunked lap on a real Ray ring: FedAvg's lap (a whole model, far over the chunk
threshold) goes as a ring all-reduce, and a member that dies is found mid-lap, when a chunk
sent to it fails; the lap restarts over the new view and every survivor applies one total."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from ring_actors.runtime.driver import run_experiment
from tests.conftest import SAMPLE, small_config

pytestmark = pytest.mark.slow


def test_a_member_crashing_mid_lap_restarts_the_chunked_lap_over_the_survivors(ray_local, tmp_path):
    config = small_config(
        tmp_path,
        f"data.dataset={SAMPLE}",
        "algorithm.name=fedavg",
        "clients.count=4",
        "experiment.rounds=3",
        "schedule.hop_timeout_s=6",
        "schedule.lap_engine=ring",  # the actor-call lap, in chunks
        "schedule.chunked_laps=always",  # four members on two CPUs: auto sends one token
        # No heartbeat finds the crash first: the ring does, when a chunk sent to it fails.
        "schedule.heartbeat_s=600",
        "faults=[{at_round: 1, crash: [2]}]",
    )
    out = tmp_path / "out"
    summary = run_experiment(config, out, progress=False)
    assert summary["rounds_completed"] == 3
    assert summary["ring_order"] == [0, 1, 3]
    assert summary["events"]["crashes"] == 1 and summary["events"]["lost_payloads"] == 0
    rows = pq.read_table(out / "metrics.parquet").to_pylist()
    events = pq.read_table(out / "events.parquet").to_pylist()
    # Round 0, in chunks: every member sends the same 2(N-1)/N of a model (one token made
    # its leader send two models, and others one).
    sent = [r["bytes_sent"] for r in rows if r["round"] == 0]
    assert len(sent) == 4 and max(sent) < 1.05 * min(sent)
    for round_, members in ((0, 4), (1, 3), (2, 3)):
        applied = [r for r in rows if r["round"] == round_]
        assert len(applied) == members
        assert {r["lap_average_contributors"] for r in applied} == {float(members)}
        assert len({r["lap_average_checksum"] for r in applied}) == 1  # one total each round
    restarts = [e for e in events if e["kind"] == "lap_restarted"]
    assert restarts and all(e["round"] == 1 and "in chunks" in e["detail"] for e in restarts)
    assert not [e for e in events if e["kind"] in ("lap_failed", "lap_token_refused")]


def test_on_fewer_cpus_than_members_a_lap_goes_as_one_token(ray_local, tmp_path):
    """``auto`` on a Ray of two CPUs: four members would share them, so FedAvg's lap goes
    as one token, whose leader sends its model and the total where others send less."""
    config = small_config(
        tmp_path,
        f"data.dataset={SAMPLE}",
        "algorithm.name=fedavg",
        "clients.count=4",
        "schedule.lap_engine=ring",
    )
    out = tmp_path / "out"
    summary = run_experiment(config, out, progress=False)
    assert summary["rounds_completed"] == config.experiment.rounds
    rows = pq.read_table(out / "metrics.parquet").to_pylist()
    sent = [r["bytes_sent"] for r in rows if r["round"] == 0]
    assert len(sent) == 4 and max(sent) > 1.5 * min(sent)  # chunks: all within 5%
    assert len({r["lap_average_checksum"] for r in rows if r["round"] == 0}) == 1
