"""``schedule.exchange``: an isolated client ends exactly as it would training alone, and
noise changes what is merged but never a tensor's shape or dtype."""

from __future__ import annotations

import pytest
import torch

from ring_actors.client.isolation_and_noise import ExchangeControl, noise_like
from ring_actors.client.method_factory import build_algorithm
from ring_actors.config import ConfigError, config_from_dict
from ring_actors.delivery.payloads import Payload
from tests.helpers.in_process_ring import CLASSES, SHAPE, client_data, ring

ROUNDS = 3


def test_noise_keeps_shapes_dtypes_and_the_tensor_s_mean_and_std():
    tensors = {
        "w": torch.linspace(-1.0, 3.0, 4000, dtype=torch.float64).reshape(40, 100),
        "half": torch.ones(8, dtype=torch.float16),
        "count": torch.tensor([3, 4]),
        "scale": torch.tensor(2.0),
    }
    noised = noise_like(tensors, torch.Generator().manual_seed(0))
    for key, value in tensors.items():
        assert (noised[key].shape, noised[key].dtype) == (value.shape, value.dtype), key
    assert not torch.equal(noised["w"], tensors["w"])
    assert noised["w"].mean().item() == pytest.approx(1.0, abs=0.05)
    assert noised["w"].std().item() == pytest.approx(tensors["w"].std().item(), rel=0.05)
    assert noised["count"] is tensors["count"] and noised["scale"] is tensors["scale"]


def test_only_noise_changes_what_is_taken_and_only_none_drops_the_laps():
    payload = Payload(1, 0, 0, 0, {"w": torch.arange(6.0)}, 5)
    normal, none, noise = (ExchangeControl(mode, seed=0) for mode in ("normal", "none", "noise"))
    assert normal.taken([payload]) == [payload] and none.taken([payload]) == [payload]
    (taken,) = noise.taken([payload])
    assert (taken.sender, taken.num_samples) == (1, 5)
    assert not torch.equal(taken.tensors["w"], payload.tensors["w"])
    assert normal.laps(("avg",)) == noise.laps(("avg",)) == ("avg",) and none.laps(("avg",)) == ()


def test_the_config_names_the_allowed_values():
    with pytest.raises(ConfigError, match="schedule.exchange: must be one of 'normal', 'none'"):
        config_from_dict({"schedule": {"exchange": "off"}})


def trained_alone(config, client_id: int) -> dict[str, torch.Tensor]:
    """The client's predictions after ``ROUNDS`` rounds on its own data, with no ring."""
    algorithm = build_algorithm(config, client_id, CLASSES, SHAPE, torch.device("cpu"))
    data = client_data(4)[client_id]
    for round_ in range(ROUNDS):
        algorithm.begin_round(round_)
        algorithm.merge([])
        algorithm.train_round(data.train)
    return algorithm.predict(data.local_test.normalise(data.local_test.x))


def predictions(run, client_id: int) -> dict[str, torch.Tensor]:
    test = client_data(4)[client_id].local_test
    return run.clients[client_id].core.algorithm.predict(test.normalise(test.x))


@pytest.mark.parametrize("method", ["dfedavg", "fedavg"])  # pushes, and a ring lap
def test_an_isolated_client_ends_as_it_would_training_alone(tmp_path, method):
    isolated = ring(tmp_path / "none", algorithm=method, rounds=ROUNDS, exchange="none")
    summary = isolated.run(timeout_s=60)
    assert summary["rounds_completed"] == ROUNDS and summary["hops"] == 0
    alone = trained_alone(isolated.config, 1)
    for key, value in predictions(isolated, 1).items():
        assert torch.equal(value, alone[key]), key
    exchanging = ring(tmp_path / "normal", algorithm=method, rounds=ROUNDS)
    exchanging.run(timeout_s=60)
    assert not torch.equal(predictions(exchanging, 1)["acc"], alone["acc"])


def test_noise_travels_as_the_state_would_but_merges_something_else(tmp_path):
    normal = ring(tmp_path / "normal", rounds=ROUNDS)
    noise = ring(tmp_path / "noise", rounds=ROUNDS, exchange="noise")
    sent = [run.run(timeout_s=60) for run in (normal, noise)]
    assert [s["rounds_completed"] for s in sent] == [ROUNDS, ROUNDS]
    assert sent[0]["hops"] == sent[1]["hops"] == 4 * ROUNDS  # every push checked and taken
    assert sent[0]["bytes_per_hop"] == sent[1]["bytes_per_hop"]
    assert not torch.equal(predictions(normal, 1)["acc"], predictions(noise, 1)["acc"])
