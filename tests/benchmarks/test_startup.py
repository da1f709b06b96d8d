"""The start-up benchmark's traced child wraps phases of the CLI by name: each must exist."""

from __future__ import annotations

import pytest

from benchmarks.startup import TRACED, traced_owner


@pytest.mark.parametrize(("module", "path", "label"), TRACED)
def test_every_traced_phase_names_a_callable_of_the_code_it_times(module, path, label):
    owner, name = traced_owner(module, path)
    assert callable(getattr(owner, name, None)), f"{module}.{path} ({label}) is gone"
