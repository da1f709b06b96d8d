"""A client process loads only what it uses: no tracking, plotting or compiler stacks."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("mlflow", "matplotlib", "scipy", "pandas", "pyarrow", "sympy", "torch._dynamo")

TRAIN_ONE_ROUND = """
import sys
import numpy as np
import torch
from ring_actors.runtime.client_actor import ClientActor  # what a client worker imports
from ring_actors.algorithms import ALGORITHMS, TaskSpec
from ring_actors.config import load_config
from ring_actors.data.images import LabelledImages

rng = np.random.default_rng(0)
x = rng.integers(0, 255, (64, 1, 28, 28), dtype=np.uint8)
y = rng.integers(0, 10, 64)
data = LabelledImages.from_arrays(x, y, (0.5,), (0.25,))
for name in ("fedavg", "drdfl", "dfedavg", "local"):
    config = load_config(None, [f"algorithm.name={name}", "algorithm.backbone=cnn"])
    task = TaskSpec(10, (1, 28, 28), 1, 32, torch.device("cpu"), seed=1, shared_seed=0)
    algorithm = ALGORITHMS[name](config.algorithm.options, task)
    algorithm.train_round(data)
    algorithm.evaluate(data)
print(",".join(m for m in HEAVY if m in sys.modules))
"""


@pytest.mark.slow
def test_a_client_trains_without_importing_heavy_stacks():
    code = f"HEAVY = {HEAVY!r}\n{TRAIN_ONE_ROUND}"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
