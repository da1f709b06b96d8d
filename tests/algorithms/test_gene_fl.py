"""GENE-FL's Fisher mask, layer scores, schedule, lap averaging, clustering and joining."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from ring_actors.algorithms import ALGORITHMS
from ring_actors.algorithms.base import TaskSpec
from ring_actors.algorithms.gene_fl import GeneFL, GeneFLOptions
from ring_actors.algorithms.gene_fl_ops import (
    diagonal_fisher,
    fisher_mask,
    gamma_floor,
    kmeans,
    layer_groups,
    layer_scores,
    min_max,
    nearest,
    next_gamma,
    takes_part,
    top_layers,
)
from ring_actors.data.images import LabelledImages
from ring_actors.delivery.payloads import Channel, Payload
from tests.helpers.synthetic import run_laps, separable

CPU = torch.device("cpu")
SHAPE = (1, 16, 16)  # small images keep the CNN fast on two cores
COUNTS = (32, 22, 14, 6)  # samples per class in the clustering tests


def make(seed=1, epochs=1, batch=32, **options) -> GeneFL:
    opts = GeneFLOptions(**{"participation": 1.0, "clusters": 1, **options})
    return GeneFL(opts, TaskSpec(4, SHAPE, epochs, batch, CPU, seed, shared_seed=0))


def horizontal(seed: int, n: int = 64) -> LabelledImages:
    return separable(n=n, shape=SHAPE, seed=seed)


def skewed(seed: int, vertical: bool = False) -> LabelledImages:
    """Unequal class counts (distinct singular values, so a stable signature); vertical bands
    span a different data subspace, hence another cluster."""
    data = separable(n=128, shape=SHAPE, seed=seed)
    keep = torch.cat([torch.nonzero(data.y == c).flatten()[:m] for c, m in enumerate(COUNTS)])
    x = data.x[keep].transpose(2, 3).contiguous() if vertical else data.x[keep]
    return LabelledImages(x, data.y[keep], data.mean, data.std)


def layer_value(algo: GeneFL, key: str) -> torch.Tensor:
    return algo.model.state_dict()[key].detach().clone()


# ---- pure pieces on hand-made values --------------------------------------------------------


def test_registry_names_gene_fl():
    assert ALGORITHMS["gene_fl"] is GeneFL


def test_fisher_and_mask_on_a_linear_model():
    """W = 0 gives p = (1/2, 1/2): per-sample gradients are (p - e_y) x^T and p - e_y."""
    model = nn.Linear(2, 2)
    with torch.no_grad():
        model.weight.zero_()
        model.bias.zero_()
    params = dict(model.named_parameters())
    samples = [
        (torch.tensor([[1.0, 2.0]]), torch.tensor([0])),
        (torch.tensor([[2.0, 0.0]]), torch.tensor([1])),
    ]
    fisher = diagonal_fisher(model, params, samples)
    # sample 1: [[-.5, -1], [.5, 1]]^2; sample 2: [[1, 0], [-1, 0]]^2; biases: .25 each time
    torch.testing.assert_close(fisher["weight"], torch.tensor([[0.625, 0.5], [0.625, 0.5]]))
    torch.testing.assert_close(fisher["bias"], torch.tensor([0.25, 0.25]))
    # global min 0.25, max 0.625: the normalisation spans both tensors
    normalised = min_max(fisher)
    torch.testing.assert_close(normalised["weight"], torch.tensor([[1.0, 2 / 3], [1.0, 2 / 3]]))
    torch.testing.assert_close(normalised["bias"], torch.zeros(2))
    mask = fisher_mask(fisher, 0.5)
    assert mask["weight"].all() and not mask["bias"].any()
    mask = fisher_mask(fisher, 0.7)
    assert mask["weight"].tolist() == [[True, False], [True, False]]
    # a constant Fisher masks nothing instead of dividing by zero
    assert not any(m.any() for m in fisher_mask({"a": torch.ones(3)}, 0.5).values())


def test_layer_score_is_cosine_over_size_normalised():
    old = [
        torch.tensor([1.0, 0.0]),
        torch.tensor([1.0, 0, 0, 0]),
        torch.ones(3),
        torch.tensor([1.0, 0]),
    ]
    new = [
        torch.tensor([2.0, 0.0]),
        torch.tensor([0.0, 1, 0, 0]),
        torch.ones(3),
        torch.tensor([1.0, 1]),
    ]
    raw = [1 / 2, 0.0, 1 / 3, (1 / math.sqrt(2)) / 2]
    expected = torch.tensor(raw) / sum(raw)
    scores = layer_scores(new, old)
    torch.testing.assert_close(scores, expected)
    assert float(scores.sum()) == pytest.approx(1.0)
    assert top_layers(scores.tolist(), 2) == [0, 3]
    assert top_layers([0.5, 0.5, 0.1], 1) == [0]  # ties: the lower index


def test_gamma_floor_and_schedule_values():
    sizes = [100, 10, 1000, 1, 5000]  # total 6111; ascending 1, 10, 100, 1000, 5000
    assert gamma_floor(sizes, 0.0001) == 1
    assert gamma_floor(sizes, 0.01) == 3  # 111 >= 61.11
    assert gamma_floor(sizes, 0.18) == 4  # 1111 >= 1099.98
    assert gamma_floor(sizes, 1.0) == 4  # never the whole model: the largest stays personal
    gamma, best, seen = 6, 0.0, []
    for acc in [0.50, 0.60, 0.595, 0.50, 0.70, 0.80, 0.90]:
        gamma, best = next_gamma(gamma, best, acc, gamma_min=3, delta=0.01)
        seen.append((gamma, best))
    assert seen == [
        (5, 0.50),
        (4, 0.60),
        (3, 0.60),  # within delta of the best: still shrinks
        (3, 0.60),  # dropped by more than delta: holds
        (3, 0.70),  # at the floor
        (3, 0.80),
        (3, 0.90),
    ]
    gamma, _ = next_gamma(5, 0.6, 0.5, gamma_min=1, delta=0.01)
    assert gamma == 5


def test_participation_draw_is_seeded_per_round_and_client():
    draws = [takes_part(0, r, 7, 0.3) for r in range(400)]
    assert draws == [takes_part(0, r, 7, 0.3) for r in range(400)]
    assert 0.22 < np.mean(draws) < 0.38
    assert draws != [takes_part(0, r, 8, 0.3) for r in range(400)]
    assert all(takes_part(0, r, 7, 1.0) for r in range(10))
    assert not any(takes_part(0, r, 7, 0.0) for r in range(10))


def test_kmeans_is_deterministic_and_finds_the_groups():
    g = np.random.default_rng(0)
    points = np.concatenate([g.normal(0, 0.1, (5, 3)), g.normal(5, 0.1, (4, 3))])
    labels, centroids = kmeans(points, 2, seed=3)
    again, centroids_again = kmeans(points.copy(), 2, seed=3)
    assert np.array_equal(labels, again) and np.array_equal(centroids, centroids_again)
    assert len(set(labels[:5])) == 1 and len(set(labels[5:])) == 1 and labels[0] != labels[5]
    np.testing.assert_allclose(centroids[labels[5]], points[5:].mean(0))


def test_nearest_picks_the_closest_centroid():
    centroids = torch.tensor([[0.0, 0.0], [3.0, 4.0], [10.0, 0.0]])
    assert nearest(torch.tensor([2.0, 3.0]), centroids) == 1
    assert nearest(torch.tensor([7.0, 0.0]), centroids) == 2


def test_batchnorm_statistics_travel_with_the_weight():
    groups = layer_groups(nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2)))
    assert groups["1.weight"] == ("1.weight", "1.running_mean", "1.running_var")
    assert groups["1.bias"] == ("1.bias",) and groups["0.weight"] == ("0.weight",)


def test_options_reject_bad_values():
    with pytest.raises(ValueError, match=r"^participation: must be in \[0, 1\]"):
        GeneFLOptions(participation=1.5)
    with pytest.raises(ValueError, match=r"^clusters: must be an integer >= 1"):
        GeneFLOptions(clusters=0)
    with pytest.raises(ValueError, match=r"^gene_fraction"):
        GeneFLOptions(gene_fraction=0.0)


# ---- the ring laps ----------------------------------------------------------------------


@pytest.mark.parametrize("weighting", ["count", "samples"])
def test_lap_gives_the_per_layer_mean_over_contributors(weighting):
    sizes = [40, 64, 24]
    algos = [make(seed=s, weighting=weighting) for s in range(3)]
    for algo, n in zip(algos, sizes, strict=True):
        algo.train_round(horizontal(algo.task.seed, n))
    names = list(algos[0].params)
    conv_w, conv_b, head_w = names[0], names[1], names[-2]
    algos[0].selected = (conv_w, head_w)
    algos[1].selected = (conv_w,)
    algos[2].selected = (head_w,)
    before = [{k: layer_value(a, k) for k in names} for a in algos]
    run_laps(algos, round_=1)
    weights = sizes if weighting == "samples" else [1, 1, 1]

    def mean(key: str, who: list[int]) -> torch.Tensor:
        total = sum(weights[i] * before[i][key] for i in who)
        return total / sum(weights[i] for i in who)

    for algo in algos:
        torch.testing.assert_close(algo.downloaded[conv_w], mean(conv_w, [0, 1]))
        torch.testing.assert_close(algo.downloaded[head_w], mean(head_w, [0, 2]))
        assert conv_b not in algo.downloaded  # nobody sent it
        torch.testing.assert_close(algo.anchor[conv_w], mean(conv_w, [0, 1]))
    # the learnGene kept for joiners: layers selected by a (weighted) majority; by samples
    # the head's contributors hold 40 + 24 of 128, not more than half
    majority = {conv_w, head_w} if weighting == "count" else {conv_w}
    assert set(algos[1].genes[0]) == majority


def test_non_participant_contributes_nothing_and_does_not_train():
    algo = make(participation=0.0)
    start = {k: layer_value(algo, k) for k in algo.params}
    metrics = algo.train_round(horizontal(0))
    assert metrics["participated"] == 0.0
    assert algo.contribute("learngene", 0) == {}
    assert all(torch.equal(layer_value(algo, k), v) for k, v in start.items())
    known = make(known_rounds=0)  # a known client after the known phase: stops training
    assert known.train_round(horizontal(0))["participated"] == 0.0


def test_lap_reaches_the_personal_model_only_when_the_client_next_trains():
    """Evaluation follows the lap: it must see the model the client's training produced."""
    algos = [make(seed=s, lr=1e-12) for s in range(2)]  # lr ~ 0: the models move only here
    for algo in algos:
        algo.train_round(horizontal(algo.task.seed))
    with torch.no_grad():  # as if client 1's training had taken it elsewhere
        for p in algos[1].params.values():
            p.add_(1.0)
    trained = [{k: layer_value(a, k) for k in a.params} for a in algos]
    run_laps(algos, round_=0)
    for algo, own in zip(algos, trained, strict=True):
        assert all(torch.equal(layer_value(algo, k), v) for k, v in own.items())
    algos[0].train_round(horizontal(0))  # the download lands before training (lr ~ 0)
    for name in algos[0].selected:
        mean = (trained[0][name] + trained[1][name]) / 2
        torch.testing.assert_close(layer_value(algos[0], name), mean)


def test_non_participant_keeps_its_model_not_its_cluster_model():
    active, idle = make(seed=1), make(seed=2, participation=0.0)
    idle.train_round(horizontal(2))  # not drawn: trains nothing
    active.train_round(horizontal(1))
    own = {k: layer_value(idle, k) for k in idle.params}
    run_laps([active, idle], round_=0)
    assert all(torch.equal(layer_value(idle, k), v) for k, v in own.items())
    torch.testing.assert_close(
        idle.anchor[active.selected[0]], layer_value(active, active.selected[0])
    )


def test_gamma_floor_leaves_the_small_cnns_large_layer_personal():
    algo = make()
    assert algo.gamma_min < len(algo.params)
    sizes = [p.numel() for p in algo.params.values()]
    assert max(sizes) > 0.8 * sum(sizes)  # the case the floor used to turn into the whole model


def test_known_client_past_its_phase_keeps_its_model_while_others_average():
    retired, active = make(seed=1, known_rounds=1), make(seed=2)
    retired.round = 1  # its known phase is over
    for algo in (retired, active):
        algo.train_round(horizontal(algo.task.seed))
    kept = {k: layer_value(retired, k) for k in retired.params}
    run_laps([retired, active], round_=1)
    assert all(torch.equal(layer_value(retired, k), v) for k, v in kept.items())
    assert retired.genes[0]  # it still holds the learnGene a joiner after it is served


def test_gamma_shrinks_in_step_on_every_client():
    algos = [make(seed=s, gamma_delta=1.0, gene_fraction=0.001) for s in range(2)]
    full = algos[0].gamma
    assert (full, algos[0].gamma_min) == (8, 4)  # the CNN's 4 biases hold 612 of 579k values
    for round_ in range(2):
        for algo in algos:
            algo.train_round(horizontal(algo.task.seed))
        run_laps(algos, round_)
    assert [a.gamma for a in algos] == [full - 2, full - 2]
    assert all(a.round == 2 for a in algos)
    assert len(algos[0].selected) == full - 1  # the round-1 learnGene used round 0's gamma


def clustered_ring() -> list[GeneFL]:
    """Four clients, two data subspaces, K = 2; round 0 (signatures + learnGene) done."""
    data = [skewed(0), skewed(1), skewed(2, True), skewed(3, True)]
    algos = [make(seed=s + 1, clusters=2) for s in range(4)]
    for algo, d in zip(algos, data, strict=True):
        algo.train_round(d)
    assert algos[0].laps(0) == ("signatures", "learngene") and algos[0].laps(1) == ("learngene",)
    run_laps(algos, round_=0)
    return algos


def test_clustering_is_identical_on_every_client():
    algos = clustered_ring()
    for algo in algos[1:]:
        assert torch.equal(algo.centroids, algos[0].centroids)
        assert torch.equal(algo.counts, algos[0].counts)
    clusters = [a.cluster for a in algos]
    assert clusters[0] == clusters[1] != clusters[2] == clusters[3]
    assert algos[0].counts.tolist() == [2.0, 2.0]
    # each cluster's model is the mean of its own two members only
    key = next(iter(algos[0].params))
    torch.testing.assert_close(algos[0].anchor[key], algos[1].anchor[key])
    assert not torch.equal(algos[0].anchor[key], algos[2].anchor[key])
    # the token's key order depends on where the lap starts: it must not matter
    gathered = {}
    for algo in reversed(algos):
        gathered.update(algo.contribute("signatures", 0))
    late = make(seed=2, clusters=2)  # client 1's seed: it finds its own signature
    late.apply_lap("signatures", 0, gathered, [3, 2, 1, 0])
    assert torch.equal(late.centroids, algos[0].centroids) and late.cluster == clusters[1]


def test_joiner_picks_the_nearest_cluster_and_inherits_its_learngene():
    algos = clustered_ring()
    handed = algos[0].hand_off_state()  # a predecessor in the other cluster
    joiner = make(seed=9, clusters=2)
    joiner.init_from(Payload(0, 0, 0, -1, handed, channel=Channel.INIT))
    assert joiner.round == 1 and joiner.pending
    target = algos[2].cluster
    gene = algos[0].genes[target]
    metrics = joiner.train_round(skewed(9, vertical=True))
    assert joiner.cluster == target
    assert metrics["initia_bytes"] == sum(v.numel() * v.element_size() for v in gene.values())
    for key, value in gene.items():
        if key in joiner.anchor:  # the anchor holds the inherited values until the next lap
            torch.testing.assert_close(joiner.anchor[key], value)
    run_laps([*algos, joiner], round_=1)  # the joiner's signature moves its centroid everywhere
    assert joiner.counts[target] == 3.0 and algos[0].counts[target] == 3.0
    assert torch.equal(joiner.centroids, algos[1].centroids)


# ---- learning ----------------------------------------------------------------------------------


def test_learns_separable_data_above_chance():
    # a low floor, so the later rounds share only part of the model
    algos = [make(seed=s, epochs=2, batch=16, lr=0.05, gene_fraction=0.001) for s in range(2)]
    data = [horizontal(s, 96) for s in range(2)]
    for round_ in range(3):
        for algo, d in zip(algos, data, strict=True):
            metrics = algo.train_round(d)
            assert math.isfinite(metrics["loss"])
        run_laps(algos, round_)
    assert algos[0].gamma == 5 and len(algos[0].selected) == 6
    test = horizontal(99, 128)
    for algo in algos:
        assert algo.evaluate(test)["acc"] > 0.6  # chance is 0.25


def test_a_joiner_trains_past_the_known_phase_with_or_without_a_hand_off():
    """An agnostic newcomer started fresh (nothing handed over) is no known client: it must
    train after the known phase, as a handed one does, or the fresh-start control is void."""
    known = make(known_rounds=2)
    known.round = 5
    assert known.train_round(horizontal(0))["participated"] == 0.0
    fresh = make(seed=2, known_rounds=2)
    fresh.joining(5)
    start = {k: layer_value(fresh, k) for k in fresh.params}
    assert fresh.train_round(horizontal(1))["participated"] == 1.0
    assert fresh.round == 6
    assert not all(torch.equal(layer_value(fresh, k), v) for k, v in start.items())
