"""A method chosen on the command line trains with its own defaults, not another method's."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from ring_actors.algorithms import ALGORITHMS
from ring_actors.algorithms.base import AlgorithmOptions
from ring_actors.config import load_config

QUICKSTART = Path(__file__).resolve().parents[2] / "jobs" / "configs" / "quickstart.yaml"
SHARED = [f.name for f in dataclasses.fields(AlgorithmOptions)]


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_quickstart_leaves_every_shared_option_to_the_chosen_method(name):
    options = load_config(QUICKSTART, [f"algorithm.name={name}"]).algorithm.options
    defaults = ALGORITHMS[name].Options()
    for key in SHARED:
        assert getattr(options, key) == getattr(defaults, key), key
