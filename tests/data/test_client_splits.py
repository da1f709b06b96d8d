"""How the driver splits data among clients, agnostic joiners included (no Ray)."""

from __future__ import annotations

import numpy as np

from ring_actors.config import config_from_dict
from ring_actors.data.client_splits import evaluated_split, split_for
from tests.helpers.toy_dataset import dataset


def config(joiner_classes: str):
    return config_from_dict(
        {
            "clients": {"count": 4},
            "data": {
                "partition": {
                    "kind": "shard",
                    "classes_per_client": 2,
                    "joiner_classes": joiner_classes,
                }
            },
            "faults": [{"at_round": 1, "join": 2}],
        }
    )


def test_agnostic_joiners_hold_only_the_classes_the_first_clients_never_see():
    data = dataset()
    splits = split_for(config("other_half"), data)
    assert len(splits) == 6
    first = set(np.concatenate([data.train_y[s.train] for s in splits[:4]]).tolist())
    joiners = set(np.concatenate([data.train_y[s.train] for s in splits[4:]]).tolist())
    assert first <= {0, 1, 2, 3, 4} and joiners <= {5, 6, 7, 8, 9}
    for s in splits:  # each test split mirrors its own client's classes
        assert set(data.test_y[s.test]) <= set(data.train_y[s.train])
    every = np.concatenate([s.train for s in splits])
    assert len(every) == len(set(every.tolist()))  # disjoint


def test_by_default_joiners_draw_from_every_class():
    data = dataset()
    splits = split_for(config("all"), data)
    joiners = set(np.concatenate([data.train_y[s.train] for s in splits[4:]]).tolist())
    first = set(np.concatenate([data.train_y[s.train] for s in splits[:4]]).tolist())
    assert len(splits) == 6 and len(first | joiners) > 5 and not joiners <= {5, 6, 7, 8, 9}


def test_a_clients_local_test_is_cut_to_a_seeded_subset_of_its_split():
    data = dataset()
    whole = config_from_dict({"clients": {"count": 2}})
    capped = config_from_dict({"clients": {"count": 2}, "eval": {"local_max_samples": 5}})
    splits = split_for(capped, data)
    assert [len(s.test) for s in splits] == [len(s.test) for s in split_for(whole, data)]
    for client_id, split in enumerate(splits):
        cut = evaluated_split(capped, split, client_id)
        assert len(cut.test) == 5 < len(split.test)
        assert set(cut.test.tolist()) <= set(split.test.tolist())
        assert np.array_equal(cut.train, split.train)
        again = evaluated_split(capped, split, client_id)
        assert np.array_equal(cut.test, again.test)  # a resume scores the same images
        assert evaluated_split(whole, split, client_id) is split
    first, second = (evaluated_split(capped, s, i).test for i, s in enumerate(splits))
    assert not np.array_equal(first, second)
