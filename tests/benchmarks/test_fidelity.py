"""The fidelity simulator is trusted only as far as it computes what the runtime computes: on
one small setting it must give the in-process ring's accuracies, client for client, for each
way a method exchanges (pushes, a ring lap, offers with pulls)."""

from __future__ import annotations

import pytest
import torch

from benchmarks.fidelity import Setting, run_config, simulate
from ring_actors.data.sources import load_dataset
from ring_actors.in_process import InProcessRing
from tests.conftest import DATA_ROOT, needs_data

pytestmark = [needs_data, pytest.mark.slow]
SETTING = Setting(
    root=str(DATA_ROOT),
    clients=3,
    samples=60,
    rounds=3,
    eval_every=1,
    last=1,
    global_max=150,
    local_max=100_000,  # every client's whole test split, as the runtime evaluates
)


@pytest.mark.parametrize("method", ["dfedavg", "fedavg", "ua_pdfl"])
def test_the_simulation_gives_the_ring_its_accuracies(tmp_path, method):
    torch.set_num_threads(1)
    arrays = load_dataset("fashion-mnist", DATA_ROOT, download=False)
    simulated = simulate(method, {}, SETTING, arrays, seed=0)["rounds"][-1]
    ring = InProcessRing.from_config(run_config(SETTING, seed=0, method=method), tmp_path)
    summary = ring.run(timeout_s=120)
    assert summary["rounds_completed"] == SETTING.rounds
    final = sorted(
        (r for r in ring.coordinator.rows if r["round"] == SETTING.rounds - 1),
        key=lambda r: r["client"],
    )
    assert [r["local_acc"] for r in final] == simulated["local"]
    assert [r["global_acc"] for r in final] == simulated["global"]
