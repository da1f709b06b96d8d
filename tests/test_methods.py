"""The lap-based methods learn end to end on real Ray actors and real Fashion-MNIST."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from ring_actors.runtime.driver import run_experiment
from tests.conftest import needs_data, small_config

pytestmark = [needs_data, pytest.mark.slow]


def test_pfedgm_learns_by_ring_lap_and_personal_heads(ray_local, tmp_path):
    config = small_config(
        tmp_path, "algorithm.name=pfedgm", "algorithm.participation=1.0", "clients.count=4"
    )
    out = tmp_path / "out"
    summary = run_experiment(config, out, progress=False)
    assert summary["rounds_completed"] == 3
    assert summary["local_acc"]["mean"] > 0.8  # two classes per client: chance is 0.5
    assert summary["events"]["lost_payloads"] == 0
    assert summary["hops"] > 0  # the lap tokens are the only traffic
    events = pq.read_table(out / "events.parquet").to_pylist()
    assert not [e for e in events if e["kind"] == "lap_failed"]


def test_gene_fl_clusters_averages_and_serves_a_joiner(ray_local, tmp_path):
    config = small_config(
        tmp_path,
        "algorithm.name=gene_fl",
        "algorithm.clusters=2",
        "algorithm.participation=1.0",
        "algorithm.optimizer=adam",  # ten steps a round: SGD at the paper's rate barely moves
        "algorithm.lr=0.002",
        "algorithm.known_rounds=2",  # as in the paper, the known clients stop as joiners come
        "clients.count=4",
        "clients.num_cpus=0.4",  # four clients and the joiner on two CPUs
        "experiment.rounds=5",
        "data.partition.joiner_classes=other_half",
        "faults=[{at_round: 2, join: 1}]",
    )
    out = tmp_path / "out"
    summary = run_experiment(config, out, progress=False)
    assert summary["rounds_completed"] == 5
    assert summary["events"]["joins"] == 1
    assert summary["events"]["lost_payloads"] == 0
    events = pq.read_table(out / "events.parquet").to_pylist()
    assert [e["client"] for e in events if e["kind"] == "join_initialised"] == [4]
    # Spliced in before the ring began its round: no lap had to be restarted or fetched.
    laps = {"lap_failed", "lap_restarted", "lap_result_fetched"}
    assert not [e for e in events if e["kind"] in laps]
    rows = pq.read_table(out / "metrics.parquet").to_pylist()
    joiner = sorted((r for r in rows if r["client"] == 4), key=lambda r: r["round"])
    assert joiner and joiner[0]["round"] == 2
    assert joiner[0]["initia_bytes"] > 0  # it inherited its cluster's learnGene
    # Two classes of its own that the known clients never saw: chance is 0.5.
    assert joiner[-1]["local_acc"] > 0.8
