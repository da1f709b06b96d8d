"""The hop benchmark's code at its smallest: both formats deliver, and each is timed."""

from __future__ import annotations

import json

import pytest

from benchmarks.hop import main

pytestmark = pytest.mark.slow


def test_both_formats_deliver_and_are_timed(tmp_path, no_ray):
    out = tmp_path / "hop.json"
    rows = main(["--backbones", "cnn", "--repeats", "2", "--json", str(out)])
    assert [(r["backbone"], r["format"]) for r in rows] == [
        ("cnn", "pickled tensors"),
        ("cnn", "wire"),
    ]
    assert all(0 < r["min_ms"] <= r["median_ms"] <= r["max_ms"] for r in rows)
    assert all(r["repeats"] == 2 and r["mb"] > 1 for r in rows)
    assert json.loads(out.read_text()) == rows
