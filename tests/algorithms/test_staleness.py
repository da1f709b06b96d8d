"""Staleness-aware merging on constructed cases: (1 + s) ** -a per received state."""

from __future__ import annotations

import pytest
import torch

from ring_actors.algorithms.base import TaskSpec
from ring_actors.algorithms.dfedavg import DFedAvg, DFedAvgOptions
from ring_actors.algorithms.drdfl import DRDFL, LEARNGENE_PREFIX, DRDFLOptions
from ring_actors.algorithms.staleness import staleness, staleness_weights, weighted_average
from ring_actors.delivery.payloads import Payload, detach_to_cpu

CPU = torch.device("cpu")


def test_staleness_counts_rounds_behind_the_freshest_possible():
    assert staleness(5, 4) == 0  # round 4 is the freshest a round-5 merge can see
    assert staleness(5, 1) == 3
    assert staleness(5, 6) == 0  # a sender ahead is not stale


def test_weights_follow_the_documented_function():
    assert staleness_weights(10, [9, 8, 6], 0.0) == [1.0, 1.0, 1.0]
    assert staleness_weights(10, [9, 8, 6], 1.0) == pytest.approx([1.0, 1 / 2, 1 / 4])
    assert staleness_weights(10, [9, 6], 0.5) == pytest.approx([1.0, 4**-0.5])


def test_weighted_average_with_and_without_an_own_state():
    own, a, b = torch.zeros(2), torch.ones(2), torch.full((2,), 4.0)
    assert torch.allclose(weighted_average(own, [a, b], [1.0, 1.0]), torch.full((2,), 5 / 3))
    assert torch.allclose(weighted_average(own, [a, b], [1.0, 0.25]), torch.full((2,), 2 / 2.25))
    assert torch.allclose(weighted_average(None, [a, b], [1.0, 0.25]), torch.full((2,), 2 / 1.25))


def test_weighted_average_in_place_of_the_own_state():
    own, a, b = torch.zeros(2), torch.ones(2), torch.full((2,), 4.0)
    merged = weighted_average(own, [a, b], [1.0, 0.25], out=own)
    assert merged is own and torch.allclose(own, torch.full((2,), 2 / 2.25))
    other = torch.full((2,), 7.0)  # an ``out`` that is not the own state is overwritten
    weighted_average(None, [a, b], [1.0, 0.25], out=other)
    assert torch.allclose(other, torch.full((2,), 2 / 1.25))


def test_weighted_average_leaves_its_inputs_as_they_were():
    own, a = torch.zeros(3), torch.arange(3.0)
    weighted_average(own, [a], [0.5])
    weighted_average(None, [a, own], [1.0, 1.0])
    assert torch.equal(own, torch.zeros(3)) and torch.equal(a, torch.arange(3.0))


def _dfedavg(exponent: float) -> DFedAvg:
    task = TaskSpec(4, (1, 8, 8), 1, 8, CPU, seed=0, shared_seed=0)
    return DFedAvg(DFedAvgOptions(staleness_exponent=exponent), task)


def _constant(algo, value: float, sender: int, round_: int) -> Payload:
    tensors = {k: torch.full_like(v, value) for k, v in detach_to_cpu(algo.shared_state()).items()}
    return Payload(sender, round_, 0, round_, tensors)


@pytest.mark.parametrize("exponent", [0.0, 1.0, 2.0])
def test_dfedavg_weighs_an_old_model_down(exponent):
    algo = _dfedavg(exponent)
    with torch.no_grad():
        for value in algo.model.state_dict().values():
            if value.is_floating_point():
                value.zero_()
    algo.begin_round(10)
    fresh, old = _constant(algo, 1.0, 1, 9), _constant(algo, 4.0, 2, 6)  # s = 0 and s = 3
    algo.merge([fresh, old])
    w = 4.0**-exponent
    expected = (0.0 + 1.0 + w * 4.0) / (1.0 + 1.0 + w)
    for name, value in algo.model.state_dict().items():
        if value.is_floating_point():
            assert torch.allclose(value, torch.full_like(value, expected)), name


def test_dfedavg_without_weighting_is_the_plain_average():
    weighted, plain = _dfedavg(0.0), _dfedavg(0.0)
    other = _constant(plain, 0.5, 1, 0)
    weighted.begin_round(7)  # any age: a = 0 ignores it
    weighted.merge([other])
    plain.merge([other])
    for name, value in plain.model.state_dict().items():
        assert torch.equal(value, weighted.model.state_dict()[name]), name


def test_drdfl_learngene_average_is_staleness_weighted():
    task = TaskSpec(4, (1, 28, 28), 1, 8, CPU, seed=0, shared_seed=0)
    algo = DRDFL(DRDFLOptions(staleness_exponent=1.0, t_init=0), task)
    own = {k: v.clone() for k, v in algo._learngene_state().items()}
    shared = detach_to_cpu(algo.shared_state())
    fresh = {
        k: torch.ones_like(v) if k.startswith(LEARNGENE_PREFIX) else v for k, v in shared.items()
    }
    stale = {
        k: torch.full_like(v, 3.0) if k.startswith(LEARNGENE_PREFIX) else v
        for k, v in shared.items()
    }
    algo.begin_round(5)
    algo.merge([Payload(1, 4, 0, 4, fresh), Payload(2, 1, 0, 1, stale)])  # s = 0 and s = 3
    for name, value in algo._learngene_state().items():
        expected = (own[name] + 1.0 + 0.25 * 3.0) / 2.25
        assert torch.allclose(value, expected, atol=1e-6), name
