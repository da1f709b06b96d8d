"""A partition written by one run and loaded by another gives every client the same data."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ring_actors.config import ConfigError, config_from_dict
from ring_actors.data.client_splits import split_for
from ring_actors.data.partition_file import load_partition, partition_digest, save_partition
from tests.helpers.toy_dataset import dataset


def config(partition: dict, count: int = 4):
    return config_from_dict(
        {
            "clients": {"count": count},
            "data": {
                "dataset": "fashion-mnist",
                "max_train_per_client": 25,
                "partition": partition,
            },
        }
    )


def test_a_written_partition_loads_as_the_same_client_data(tmp_path):
    data = dataset()
    drawn = split_for(config({"kind": "dirichlet", "beta": 0.3}), data)
    path = save_partition(tmp_path / "partition.json", drawn, "fashion-mnist")
    loaded = split_for(config({"kind": "file", "path": str(path)}), data)
    assert len(loaded) == len(drawn) == 4
    for a, b in zip(drawn, loaded, strict=True):
        np.testing.assert_array_equal(a.train, b.train)
        np.testing.assert_array_equal(a.test, b.test)
        # the same images and labels, not only the same numbers
        np.testing.assert_array_equal(data.train_y[a.train], data.train_y[b.train])
        np.testing.assert_array_equal(data.train_x[a.train], data.train_x[b.train])
    assert partition_digest(drawn) == partition_digest(loaded)
    # another seed draws another split, which the digest tells apart
    other = split_for(
        config_from_dict(
            {
                "clients": {"count": 4},
                "experiment": {"seed": 1},
                "data": {
                    "dataset": "fashion-mnist",
                    "partition": {"kind": "dirichlet", "beta": 0.3},
                },
            }
        ),
        data,
    )
    assert partition_digest(other) != partition_digest(drawn)


def test_kind_file_needs_a_path():
    with pytest.raises(ConfigError, match="data.partition.path"):
        config({"kind": "file"})


def test_a_file_that_does_not_fit_the_run_is_refused(tmp_path):
    data = dataset()
    splits = split_for(config({"kind": "shard"}), data)
    path = save_partition(tmp_path / "p.json", splits, "fashion-mnist")
    n_train, n_test = len(data.train_y), len(data.test_y)
    with pytest.raises(ValueError, match="holds 4 clients, the config runs 5"):
        load_partition(path, "fashion-mnist", n_train, n_test, 5)
    with pytest.raises(ValueError, match="splits dataset .fashion-mnist.*'cifar10'"):
        load_partition(path, "cifar10", n_train, n_test, 4)
    with pytest.raises(ValueError, match="indices leave"):
        load_partition(path, "fashion-mnist", 10, n_test, 4)
    with pytest.raises(FileNotFoundError, match="data.partition.path"):
        load_partition(tmp_path / "missing.json", "fashion-mnist", n_train, n_test, 4)
    record = json.loads(path.read_text())
    assert record["format"] == 1 and len(record["clients"]) == 4
