"""The Fashion-MNIST sample shipped in the package: read like the full set, offline, from any
data root, and drawn from the official files as its README says."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from ring_actors.config import load_config
from ring_actors.data import sources
from ring_actors.data.fashion_mnist_sample.make_sample import main as make_sample
from ring_actors.data.sources import (
    SAMPLE_DIR,
    DatasetUnavailable,
    dataset_facts,
    load_dataset,
)
from tests.conftest import DATA_ROOT, SAMPLE, needs_data


def test_the_sample_is_class_balanced_real_images(tmp_path, monkeypatch):
    monkeypatch.delenv("RING_ACTORS_DATA", raising=False)
    monkeypatch.setenv("RING_ACTORS_CACHE", str(tmp_path / "cache"))
    d = load_dataset(SAMPLE, tmp_path / "empty-root", download=False)
    assert d.input_shape == (1, 28, 28) and d.num_classes == 10
    assert np.bincount(d.train_y).tolist() == [500] * 10
    assert np.bincount(d.test_y).tolist() == [100] * 10
    assert 0.25 < d.train_x.mean() / 255 < 0.32  # Fashion-MNIST's mean intensity is 0.286
    assert len({x.tobytes() for x in d.train_x}) == len(d.train_x)  # no image twice


def test_the_sample_is_found_whatever_the_data_root(tmp_path):
    facts = dataset_facts(SAMPLE, tmp_path / "nowhere", download=False)
    assert facts["present"] and facts["where"] == str(SAMPLE_DIR)
    config = load_config(None, ["data.dataset=fashion-mnist-sample", "data.download=false"])
    assert config.data.dataset == SAMPLE


def test_the_sample_is_never_downloaded(tmp_path, monkeypatch):
    """A package installed without its files says so, instead of trying the network."""
    spec = sources._SPECS[SAMPLE]
    gone = dataclasses.replace(spec, layouts=sources._idx_layouts(str(tmp_path)))
    monkeypatch.setitem(sources._SPECS, SAMPLE, gone)
    with pytest.raises(DatasetUnavailable, match="reinstall the package"):
        load_dataset(SAMPLE, download=True)


def test_the_package_declares_the_sample_as_package_data():
    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    assert '"data/fashion_mnist_sample/*.gz"' in pyproject
    assert sorted(p.name for p in SAMPLE_DIR.glob("*.gz")) == [
        "t10k-images-idx3-ubyte.gz",
        "t10k-labels-idx1-ubyte.gz",
        "train-images-idx3-ubyte.gz",
        "train-labels-idx1-ubyte.gz",
    ]
    assert sum(p.stat().st_size for p in SAMPLE_DIR.glob("*.gz")) < 4e6


@needs_data
def test_the_sample_is_what_its_script_draws_from_the_official_files(tmp_path):
    make_sample([str(Path(DATA_ROOT) / "fashion-mnist"), "--out", str(tmp_path)])
    for shipped in SAMPLE_DIR.glob("*.gz"):
        assert (tmp_path / shipped.name).read_bytes() == shipped.read_bytes(), shipped.name
