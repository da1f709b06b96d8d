"""Your own dataset: ``data.dataset=module:load``, a loader checked at config load, its arrays
checked when loaded, and run through the experiment's data path into a training ring."""

from __future__ import annotations

import numpy as np
import pytest

from examples.stripes import CLASSES, SHAPE, load_stripes
from jobs.train import main
from ring_actors.config import ConfigError, config_from_dict, load_config
from ring_actors.data.sources import (
    DatasetArrays,
    DatasetError,
    dataset_facts,
    load_dataset,
    resolve_root,
)
from ring_actors.in_process import InProcessRing
from tests.helpers.train_cli import run

STRIPES = "examples.stripes:load_stripes"

LAB_DATASETS = """
import dataclasses

import numpy as np

from examples.stripes import load_stripes


def _stripes(**changes):
    return dataclasses.replace(load_stripes(None, False), **changes)


def called_with(root, download):
    return _stripes(name=f"{root}|{download}")


def as_dict(root, download):
    return {"train_x": load_stripes(root, download).train_x}


def float_images(root, download):
    return _stripes(train_x=load_stripes(root, download).train_x.astype(np.float32))


def int32_labels(root, download):
    return _stripes(test_y=load_stripes(root, download).test_y.astype(np.int32))


def flat_images(root, download):
    return _stripes(train_x=load_stripes(root, download).train_x.reshape(800, -1))


def labels_out_of_range(root, download):
    return _stripes(num_classes=3)


def fewer_labels(root, download):
    return _stripes(train_y=load_stripes(root, download).train_y[:-1])


def other_test_shape(root, download):
    return _stripes(test_x=np.zeros((4, 1, 32, 32), np.uint8), test_y=np.zeros(4, np.int64))


def rgb_statistics(root, download):
    return _stripes(mean=(0.5, 0.5, 0.5), std=(0.2, 0.2, 0.2))


def fails(root, download):
    raise FileNotFoundError(f"nothing under {root}")


def no_arguments():
    return load_stripes(None, False)


SIZE = 3
"""


@pytest.fixture
def lab(tmp_path, monkeypatch):
    """A user's module of dataset loaders, importable as ``lab_datasets``."""
    (tmp_path / "lab_datasets.py").write_text(LAB_DATASETS)
    monkeypatch.syspath_prepend(str(tmp_path))


def test_a_loader_of_ones_own_loads_with_its_root_and_download_flag(lab, tmp_path):
    dataset = load_dataset(STRIPES, tmp_path, download=False)
    assert (dataset.num_classes, dataset.input_shape) == (CLASSES, SHAPE)
    assert np.array_equal(dataset.train_x, load_stripes(tmp_path, False).train_x)
    assert load_dataset("lab_datasets:called_with", tmp_path, False).name == f"{tmp_path}|False"
    default = load_dataset("lab_datasets:called_with", None, True).name
    assert default == f"{resolve_root(None)}|True"  # $RING_ACTORS_DATA, else the user cache


def test_a_plug_in_dataset_trains_a_ring_through_the_experiment_data_path(tmp_path):
    """The driver's steps of a launch: load, split, the Global-T set, every client's data."""
    config = config_from_dict(
        {
            "experiment": {"name": "inproc", "rounds": 3},
            "data": {"dataset": STRIPES, "partition": {"kind": "iid"}},
            "clients": {"count": 3, "batch_size": 16},
            "algorithm": {"name": "fedrep", "backbone": "examples.stripes:TinyCNN"},
            "schedule": {"hop_timeout_s": 1.0, "heartbeat_s": 0.1},
            "eval": {"global_max_samples": 60},
        }
    )
    summary = InProcessRing.from_config(config, tmp_path).run(timeout_s=60)
    assert summary["rounds_completed"] == 3 and summary["dataset"] == STRIPES
    assert summary["local_acc"]["mean"] > 0.5 and summary["global_acc"]["mean"] > 0.5


@pytest.mark.parametrize(
    ("loader", "why"),
    [
        ("as_dict", "returned a dict, not a ring_actors.data.sources.DatasetArrays"),
        ("float_images", "train_x of dtype float32 .* must be uint8 images"),
        ("int32_labels", "test_y of dtype int32 .* must be int64 labels"),
        ("flat_images", r"train_x of dtype uint8 and shape \(800, 784\): must be uint8 images"),
        ("labels_out_of_range", r"train_y: labels in 0..3, outside 0..2"),
        ("fewer_labels", r"train_y .* must be int64 labels \(800,\), one per image"),
        ("other_test_shape", "train and test images of different shapes"),
        ("rgb_statistics", "must have one value per channel"),
        ("fails", "failed: FileNotFoundError: nothing under"),
    ],
)
def test_a_malformed_dataset_is_refused_naming_what_is_wrong(lab, loader, why):
    with pytest.raises(DatasetError, match=rf"^data.dataset: 'lab_datasets:{loader}' .*{why}"):
        load_dataset(f"lab_datasets:{loader}")
    load_config(None, [f"data.dataset=lab_datasets:{loader}"])  # the name itself is fine


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("examples.nowhere:load", "cannot import 'examples.nowhere:load': ModuleNotFoundError"),
        ("examples.stripes:missing", "cannot import 'examples.stripes:missing': AttributeError"),
        ("lab_datasets:SIZE", "is not callable"),
        ("lab_datasets:no_arguments", r"cannot be called as load\(root, download\)"),
    ],
)
def test_a_bad_loader_path_is_a_config_error(lab, name, why):
    with pytest.raises(ConfigError, match=rf"^data.dataset: .*{why}"):
        load_config(None, [f"data.dataset={name}"])
    with pytest.raises(DatasetError, match=why):
        load_dataset(name)


def test_a_wrong_built_in_name_still_lists_the_datasets():
    with pytest.raises(ConfigError, match=r"^data.dataset: must be one of mnist, .*svhn.*'nope'"):
        load_config(None, ["data.dataset=nope"])


def test_the_facts_of_a_plug_in_dataset_are_what_its_loader_returns(tmp_path):
    facts = dataset_facts(STRIPES, tmp_path)
    assert (facts["num_classes"], facts["input_shape"]) == (CLASSES, SHAPE)
    assert facts["present"] and facts["where"] == str(tmp_path)
    assert isinstance(load_dataset(STRIPES), DatasetArrays)


@pytest.mark.slow
def test_dry_run_with_a_plug_in_dataset_prints_its_shape_without_ray():
    overrides = [f"data.dataset={STRIPES}", "algorithm.backbone=examples.stripes:TinyCNN"]
    out, imported_ray = run("--dry-run", *overrides, "clients.count=4")
    assert f"data:      {STRIPES} at " in out and "(found): 4 classes, images 1x28x28" in out
    assert "MB per hop" in out and not imported_ray


def test_dry_run_refuses_a_malformed_dataset_naming_the_key(lab, capsys):
    assert main(["--dry-run", "data.dataset=lab_datasets:int32_labels"]) == 2
    error = capsys.readouterr().err
    assert "config error: data.dataset: 'lab_datasets:int32_labels' returned test_y" in error
