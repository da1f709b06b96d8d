"""DisPFL: ERK densities, personal masks, masked aggregation, prune and regrow, sparse pushes."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ring_actors.algorithms import ALGORITHMS
from ring_actors.algorithms.base import TaskSpec
from ring_actors.algorithms.dispfl import (
    MASK,
    DisPFL,
    DisPFLOptions,
    erk_densities,
    pack_bits,
    prune_and_regrow,
    random_mask,
    unpack_bits,
)
from ring_actors.delivery.payloads import Payload, detach_to_cpu
from tests.helpers.ring_runs import learn_on_ring
from tests.helpers.synthetic import separable

pytestmark = pytest.mark.usefixtures("one_thread")  # as a client on one CPU runs
CPU = torch.device("cpu")
SHAPE = (1, 16, 16)  # small images keep the CNN fast on two cores
LAYER = "body.3.weight"  # the second convolution: (64, 32, 5, 5)


def make(seed=1, classes=4, shape=SHAPE, batch=16, epochs=1, **options) -> DisPFL:
    task = TaskSpec(classes, shape, epochs, batch, CPU, seed, shared_seed=0)
    return DisPFL(DisPFLOptions(**options), task)


def payload(algo: DisPFL, sender: int, round_: int = 0) -> Payload:
    return Payload(sender, round_, 0, 0, detach_to_cpu(algo.shared_state()))


def counts(algo: DisPFL) -> dict[str, int]:
    return {name: int(mask.sum()) for name, mask in algo.masks.items()}


# ---- options and mask helpers --------------------------------------------------------------


def test_registered_with_the_official_defaults_and_checked_options():
    assert ALGORITHMS["dispfl"] is DisPFL
    opts = DisPFLOptions()
    assert (opts.density, opts.mask_init, opts.regrow, opts.anneal_factor) == (
        0.5,
        "erk",
        "random",
        0.5,
    )
    for key, value in [("density", 0.0), ("density", 1.5), ("anneal_factor", 2.0)]:
        with pytest.raises(ValueError, match=rf"^{key}: must be"):
            DisPFLOptions(**{key: value})
    with pytest.raises(ValueError, match="^mask_every: must be"):
        DisPFLOptions(mask_every=0)


def test_erk_densities_by_hand():
    # raw shares 20/100 = 0.2 and 200/10000 = 0.02; eps = 5050 / 220 puts the small layer
    # above 1, so it turns dense and the large one keeps (5050 - 100) / 10000 = 0.495.
    densities = erk_densities({"small": (10, 10), "large": (100, 100)}, 0.5)
    assert densities["small"] == 1.0
    assert densities["large"] == pytest.approx(0.495)


def test_erk_keeps_the_overall_density_and_favours_small_layers():
    shapes = {"conv": (64, 32, 5, 5), "fc": (512, 1024), "head": (10, 512)}
    densities = erk_densities(shapes, 0.3)
    kept = sum(densities[n] * math.prod(s) for n, s in shapes.items())
    assert kept == pytest.approx(0.3 * sum(math.prod(s) for s in shapes.values()))
    raw = {n: sum(s) / math.prod(s) for n, s in shapes.items()}  # (in + out + kernel) / size
    assert densities["head"] == 1.0  # its share would exceed 1: dense
    assert densities["conv"] / raw["conv"] == pytest.approx(densities["fc"] / raw["fc"])
    assert densities["fc"] > densities["conv"]  # fewer weights per (in + out + kernel)
    assert all(0 < d <= 1 for d in densities.values())
    assert erk_densities(shapes, 1.0) == {n: 1.0 for n in shapes}


def test_random_masks_keep_a_fixed_count_at_seed_dependent_places():
    a = random_mask((8, 9), 0.25, torch.Generator().manual_seed(1))
    b = random_mask((8, 9), 0.25, torch.Generator().manual_seed(2))
    assert a.dtype == torch.bool and a.shape == (8, 9)
    assert int(a.sum()) == int(b.sum()) == 18
    assert not torch.equal(a, b)


@pytest.mark.parametrize("numel", [1, 8, 13, 800])
def test_bit_packing_round_trips(numel):
    mask = torch.rand(numel, generator=torch.Generator().manual_seed(numel)) > 0.5
    packed = pack_bits(mask)
    assert packed.dtype == torch.uint8 and packed.numel() == math.ceil(numel / 8)
    assert torch.equal(unpack_bits(packed, (numel,)), mask)
    assert pack_bits(torch.tensor([True, False, True])).item() == 0b101


def test_prune_and_regrow_by_hand():
    weight = torch.tensor([0.1, -3.0, 0.2, 5.0, 0.0, 0.0])
    mask = torch.tensor([True, True, True, True, False, False])
    scores = torch.tensor([0.0, 0.0, 0.0, 0.0, 1.0, 2.0])
    # Half of the 4 active weights go: the two smallest magnitudes (0.1 and 0.2); the two
    # inactive positions with the largest scores come back.
    new = prune_and_regrow(weight, mask, 0.5, scores)
    assert new.tolist() == [False, True, False, True, True, True]
    assert torch.equal(prune_and_regrow(weight, mask, 0.1, scores), mask)  # int(0.4) = 0


# ---- the client ----------------------------------------------------------------------------


def test_each_client_has_its_own_mask_with_the_same_counts_and_zeros_elsewhere():
    a, b = make(seed=1), make(seed=2)
    assert set(a.masks) == {"body.0.weight", LAYER, "body.7.weight", "head.weight"}
    assert counts(a) == counts(b)
    assert not torch.equal(a.masks[LAYER], b.masks[LAYER])
    total = sum(m.numel() for m in a.masks.values())
    assert sum(counts(a).values()) == pytest.approx(0.5 * total, rel=1e-3)
    params = dict(a.model.named_parameters())
    for name, mask in a.masks.items():
        assert not params[name][~mask].any()
    uniform = make(mask_init="uniform")
    assert all(c == round(0.5 * uniform.masks[n].numel()) for n, c in counts(uniform).items())


def test_shared_state_is_the_active_values_and_packed_masks():
    a, b = make(seed=1), make(seed=2)
    shared = a.shared_state()
    params = dict(a.model.named_parameters())
    for name, mask in a.masks.items():
        assert torch.equal(shared[name], params[name][mask])
        assert torch.equal(unpack_bits(shared[name + MASK], tuple(mask.shape)), mask)
    assert torch.equal(shared["body.0.bias"], params["body.0.bias"])  # unmasked: whole
    shapes = {k: tuple(v.shape) for k, v in shared.items()}
    assert shapes == {k: tuple(v.shape) for k, v in b.shared_state().items()}  # one format
    sent = sum(v.numel() * v.element_size() for v in shared.values())
    dense = sum(p.numel() * 4 for p in a.model.parameters())
    assert 0.5 < sent / dense < 0.6  # density 0.5 of 4-byte values plus one bit a weight


def test_merge_averages_each_weight_over_the_masks_that_hold_it():
    own, left, right = make(seed=1), make(seed=2), make(seed=3)
    # Hand-made first four weights of one layer; every other weight of it is masked off.
    table = {  # (mask, values) over the first four positions
        own: ([1, 1, 1, 0], [1.0, 2.0, 3.0, 0.0]),
        left: ([1, 0, 1, 1], [5.0, 0.0, 7.0, 9.0]),
        right: ([0, 0, 1, 1], [0.0, 0.0, 11.0, 13.0]),
    }
    for algo, (bits, values) in table.items():
        mask = torch.zeros_like(algo.masks[LAYER])
        mask.view(-1)[:4] = torch.tensor(bits, dtype=torch.bool)
        algo.masks[LAYER] = mask
        with torch.no_grad():
            weight = dict(algo.model.named_parameters())[LAYER]
            weight.zero_()
            weight.view(-1)[:4] = torch.tensor(values)
    bias = [dict(a.model.named_parameters())["body.3.bias"].detach().clone() for a in table]
    own.merge([payload(left, 1), payload(right, 2)])
    params = dict(own.model.named_parameters())
    # (1 + 5) / 2, 2 / 1, (3 + 7 + 11) / 3, and 0 where the own mask is off.
    assert params[LAYER].view(-1)[:4].tolist() == pytest.approx([3.0, 2.0, 7.0, 0.0])
    assert not params[LAYER].view(-1)[4:].any()
    torch.testing.assert_close(params["body.3.bias"], torch.stack(bias).mean(0))
    assert torch.equal(own.masks[LAYER].view(-1)[:4], torch.tensor([True, True, True, False]))


def test_a_payload_whose_mask_and_values_disagree_is_refused():
    own, other = make(seed=1), make(seed=2)
    broken = other.shared_state()
    broken[LAYER] = broken[LAYER][:-1]
    with pytest.raises(ValueError, match=LAYER):
        own.merge([Payload(1, 0, 0, 0, broken)])


def test_training_keeps_inactive_weights_at_zero_and_the_counts_fixed():
    algo = make(anneal_rounds=4)
    before = {n: m.clone() for n, m in algo.masks.items()}
    kept = counts(algo)
    out = algo.train_round(separable(32, 4, SHAPE))
    assert set(out) == {"loss", "mask_changed"}
    assert counts(algo) == kept
    params = dict(algo.model.named_parameters())
    for name, mask in algo.masks.items():
        assert not params[name][~mask].any(), name
    # Round 0 prunes anneal_factor / 2 * 2 = half of each layer's active weights, and regrows
    # as many; some regrown places may be the pruned ones, so at most that much changes.
    changed = sum(int((algo.masks[n] != before[n]).sum()) for n in before)
    assert 0 < changed <= sum(kept.values())
    assert out["mask_changed"] == pytest.approx(changed / sum(m.numel() for m in before.values()))


def test_anneal_rate_follows_the_cosine_and_ends_at_zero():
    algo = make(anneal_factor=0.4, anneal_rounds=10)
    assert algo.anneal_rate(0) == pytest.approx(0.4)
    assert algo.anneal_rate(5) == pytest.approx(0.2)
    assert algo.anneal_rate(10) == pytest.approx(0.0, abs=1e-12)
    assert algo.anneal_rate(50) == pytest.approx(0.0, abs=1e-12)


def test_masks_change_only_every_mask_every_rounds():
    algo = make(mask_every=2)
    data = separable(16, 4, SHAPE)
    first = {n: m.clone() for n, m in algo.masks.items()}
    assert algo.train_round(data)["mask_changed"] == 0.0
    assert all(torch.equal(algo.masks[n], m) for n, m in first.items())
    assert algo.train_round(data)["mask_changed"] > 0


def test_gradient_regrowth_revives_the_largest_gradients():
    algo = make(regrow="gradient", mask_init="uniform")  # ERK would leave the head dense
    data = separable(16, 4, SHAPE)  # one batch: the scores are the same in both calls
    scores = algo._regrow_scores(data)["head.weight"]
    before = {n: m.clone() for n, m in algo.masks.items()}
    kept = counts(algo)
    algo._update_masks(data, 0.5)
    assert counts(algo) == kept
    after = algo.masks["head.weight"]
    grown = after & ~before["head.weight"]
    passed_over = ~after & ~before["head.weight"]
    assert grown.any()
    assert float(scores[grown].mean()) > 3 * float(scores[passed_over].mean())


def test_a_joiner_keeps_its_mask_and_takes_the_senders_covered_values():
    source, joiner = make(seed=1), make(seed=2)
    source.train_round(separable(16, 4, SHAPE))
    own_mask = joiner.masks[LAYER].clone()
    own_weight = dict(joiner.model.named_parameters())[LAYER].detach().clone()
    joiner.init_from(payload(source, 0))
    weight = dict(joiner.model.named_parameters())[LAYER]
    sent = dict(source.model.named_parameters())[LAYER]
    both = own_mask & source.masks[LAYER]
    only_own = own_mask & ~source.masks[LAYER]
    assert torch.equal(joiner.masks[LAYER], own_mask)
    assert torch.equal(weight[both], sent[both])
    assert torch.equal(weight[only_own], own_weight[only_own])
    assert not weight[~own_mask].any()
    with pytest.raises(KeyError, match=MASK):
        joiner.set_shared({k: v for k, v in source.shared_state().items() if MASK not in k})


# ---- learning on real data -----------------------------------------------------------------


@pytest.mark.slow
def test_learns_on_real_data_by_ring_pushes(fmnist_triples, tmp_path):
    losses, accuracy, _ = learn_on_ring("dispfl", fmnist_triples, 3, tmp_path)
    assert losses[-1] < losses[0]
    assert np.mean(accuracy) > 0.7, accuracy
