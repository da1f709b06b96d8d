"""UA-PDFL: divergence, decision rule, weighted merge, regulariser and learning, all without Ray."""

from __future__ import annotations

import math

import pytest
import torch

from ring_actors.algorithms import ALGORITHMS
from ring_actors.algorithms.base import TaskSpec
from ring_actors.algorithms.ua_pdfl import (
    CLASSIFIER,
    FEATURE,
    UAPDFL,
    UNIT,
    UNIT_FEATURE,
    UAPDFLOptions,
    jensen_shannon,
    symmetric_kl,
)
from ring_actors.data.images import LabelledImages
from ring_actors.delivery.payloads import Payload, detach_to_cpu
from ring_actors.models import build_backbone
from ring_actors.models.split import FeatureClassifierNet
from tests.helpers.synthetic import separable

CPU = torch.device("cpu")
SHAPE = (1, 16, 16)  # small images keep the CNN fast on two cores
CLASSES = 4


def make(seed: int = 1, epochs: int = 1, **options) -> UAPDFL:
    task = TaskSpec(CLASSES, SHAPE, epochs, 16, CPU, seed, shared_seed=0)
    return UAPDFL(UAPDFLOptions(**options), task)


def offer_from(sender: int, unit: torch.Tensor, feature: torch.Tensor, n: int = 10) -> Payload:
    return Payload(sender, 0, 0, 0, {UNIT: unit, UNIT_FEATURE: feature}, n)


def peaked(algo: UAPDFL) -> torch.Tensor:
    """A fingerprint far from the algorithm's own: nearly all mass on its least likely class."""
    own = algo.probe()[0]
    far = torch.full_like(own, 0.01)
    far[own.argmin()] = 1 - 0.01 * (len(own) - 1)
    return far


def subset(data: LabelledImages, classes: tuple[int, ...]) -> LabelledImages:
    keep = torch.isin(data.y, torch.tensor(classes))
    return LabelledImages(data.x[keep], data.y[keep], data.mean, data.std)


# ---- registry, options, model split --------------------------------------------------------


def test_registered_with_paper_defaults():
    assert ALGORITHMS["ua_pdfl"] is UAPDFL
    opts = UAPDFLOptions()
    assert (opts.lr, opts.optimizer, opts.momentum, opts.lr_decay) == (0.05, "sgd", 0.5, 0.95)
    assert (opts.threshold, opts.mu, opts.divergence) == (0.1, 0.01, "sym_kl")


@pytest.mark.parametrize(
    ("key", "value"), [("lr_decay", 0.0), ("lr_decay", 1.5), ("threshold", -0.1), ("mu", -1.0)]
)
def test_options_reject_bad_values(key, value):
    with pytest.raises(ValueError, match=rf"^{key}: must be"):
        UAPDFLOptions(**{key: value})


@pytest.mark.parametrize(("backbone", "feature_tensors"), [("cnn", 4), ("resnet18", 60)])
def test_split_puts_every_convolution_in_the_feature_extractor(backbone, feature_tensors):
    torch.manual_seed(0)
    original = build_backbone(backbone, (3, 32, 32), 10).eval()
    torch.manual_seed(0)
    split = FeatureClassifierNet(build_backbone(backbone, (3, 32, 32), 10)).eval()
    # The paper's split counts: CNN = both conv layers, ResNet-18 = all 60 tensors before fc.
    assert len(list(split.feature.parameters())) == feature_tensors
    assert not any(isinstance(m, torch.nn.Conv2d) for m in split.classifier.modules())
    assert all(k.startswith((FEATURE, CLASSIFIER)) for k in split.state_dict())
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(split(x), original(x))


def test_shared_state_is_the_whole_model_but_the_batch_counters():
    algo = make(backbone="resnet18")
    shared = algo.shared_state()
    assert not any(k.endswith("num_batches_tracked") for k in shared)
    floats = [k for k, v in algo.model.state_dict().items() if v.is_floating_point()]
    assert sorted(shared) == sorted(floats)
    assert set(algo.keys(FEATURE)) | set(algo.keys(CLASSIFIER)) == set(shared)
    assert algo.keys(CLASSIFIER) == ("classifier.0.weight", "classifier.0.bias")


# ---- divergence ----------------------------------------------------------------------------


def test_divergence_zero_symmetric_positive_and_known():
    p, q = torch.tensor([0.5, 0.5]), torch.tensor([0.9, 0.1])
    assert symmetric_kl(p, p).item() == pytest.approx(0.0, abs=1e-9)
    assert symmetric_kl(p, q).item() == pytest.approx(symmetric_kl(q, p).item())
    # ½ (0.4 ln(0.9/0.5) + 0.4 ln(0.5/0.1)) = 0.2 ln 9
    assert symmetric_kl(p, q).item() == pytest.approx(0.2 * math.log(9), rel=1e-6)
    assert symmetric_kl(torch.tensor([0.2, 0.3, 0.5]), torch.tensor([0.3, 0.3, 0.4])) > 0


def test_divergence_broadcasts_over_peers_and_survives_zeros():
    own = torch.tensor([1.0, 0.0])
    peers = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    sym = symmetric_kl(own, peers)
    assert sym.shape == (2,) and sym[0] == 0 and math.isfinite(sym[1]) and sym[1] > 10
    js = jensen_shannon(own, peers)
    assert js[0].item() == pytest.approx(0.0, abs=1e-9)
    assert js[1].item() == pytest.approx(math.log(2), rel=1e-6)  # disjoint supports: the maximum


def test_offer_is_the_softmax_on_the_all_ones_input_and_the_unit_feature():
    algo = make()
    offer = algo.offer()
    with torch.no_grad():
        ones = torch.ones(1, *SHAPE)
        expected_feature = algo.model.feature(ones)[0]
        expected = torch.softmax(algo.model(ones), 1)[0]
    torch.testing.assert_close(offer[UNIT], expected)
    torch.testing.assert_close(offer[UNIT_FEATURE], expected_feature)
    assert offer[UNIT].shape == (CLASSES,) and offer[UNIT].sum().item() == pytest.approx(1.0)


# ---- decision rule -------------------------------------------------------------------------


def test_all_similar_drops_out_to_one_random_peer():
    algo = make()
    own, feature = algo.probe()
    pulls = algo.decide([offer_from(s, own, feature) for s in (3, 5, 7)])
    assert algo.decision.dropout and algo.decision.similar == (3, 5, 7)
    chosen = [s for s, keys in pulls.items() if keys]
    assert len(chosen) == 1 and chosen[0] in (3, 5, 7)
    assert set(pulls[chosen[0]]) == set(algo.shared_state())  # the whole model of one peer
    assert sum(len(keys) for keys in pulls.values()) == len(algo.shared_state())


def test_dropout_choice_varies_with_the_private_seed():
    chosen = set()
    for seed in range(8):
        algo = make(seed=seed)
        own, feature = algo.probe()
        pulls = algo.decide([offer_from(s, own, feature) for s in range(4)])
        chosen |= {s for s, keys in pulls.items() if keys}
    assert len(chosen) > 1


def test_no_similar_peer_pulls_features_from_all_and_no_classifier():
    algo = make()
    _, feature = algo.probe()
    pulls = algo.decide([offer_from(s, peaked(algo), feature) for s in (1, 2)])
    assert not algo.decision.dropout and algo.decision.similar == ()
    assert pulls == {1: algo.keys(FEATURE), 2: algo.keys(FEATURE)}


def test_mixed_peers_pull_the_classifier_only_from_similar_ones():
    algo = make()
    own, feature = algo.probe()
    offers = [offer_from(1, own, feature), offer_from(2, peaked(algo), feature)]
    pulls = algo.decide(offers)
    assert not algo.decision.dropout and algo.decision.similar == (1,)
    assert pulls[1] == algo.keys(FEATURE) + algo.keys(CLASSIFIER)
    assert pulls[2] == algo.keys(FEATURE)
    assert algo.decision.divergences[1] == pytest.approx(0.0, abs=1e-6)
    assert algo.decision.divergences[2] > algo.options.threshold


def test_a_round_reports_each_peer_s_divergence_and_the_share_of_similar_ones():
    algo = make()
    own, feature = algo.probe()
    algo.decide([offer_from(1, own, feature), offer_from(4, peaked(algo), feature)])
    divergences = dict(algo.decision.divergences)
    metrics = algo.train_round(separable(n=32, classes=CLASSES, shape=SHAPE))
    assert metrics["divergence_from_1"] == divergences[1]
    assert metrics["divergence_from_4"] == divergences[4] > algo.options.threshold
    assert metrics["similar_fraction"] == 0.5 and metrics["dropout"] == 0.0


def test_threshold_decides_similarity():
    algo = make(threshold=50.0)  # so loose that even the peaked fingerprint counts as similar
    _, feature = algo.probe()
    algo.decide([offer_from(1, peaked(algo), feature)])
    assert algo.decision.dropout


# ---- merge ---------------------------------------------------------------------------------


def constant_payload(algo: UAPDFL, sender: int, keys, value: float, n: int) -> Payload:
    state = algo.shared_state()
    return Payload(sender, 0, 0, 0, {k: torch.full_like(state[k], value) for k in keys}, n)


def test_merge_weights_by_data_size_per_part():
    algo = make()
    algo.num_samples = 30
    own = detach_to_cpu(algo.shared_state())
    _, feature = algo.probe()
    pulls = algo.decide(
        [offer_from(1, algo.probe()[0], feature), offer_from(2, peaked(algo), feature)]
    )
    algo.merge(
        [
            constant_payload(algo, 1, pulls[1], 1.0, n=10),
            constant_payload(algo, 2, pulls[2], 4.0, n=20),
        ]
    )
    state = algo.shared_state()
    for key in algo.keys(FEATURE):  # self and both peers
        torch.testing.assert_close(state[key], (30 * own[key] + 10 * 1.0 + 20 * 4.0) / 60)
    for key in algo.keys(CLASSIFIER):  # self and the similar peer only
        torch.testing.assert_close(state[key], (30 * own[key] + 10 * 1.0) / 40)


def test_merge_over_what_arrived_when_a_pulled_peer_died():
    algo = make()
    algo.num_samples = 10
    own = detach_to_cpu(algo.shared_state())
    _, feature = algo.probe()
    pulls = algo.decide([offer_from(s, peaked(algo), feature) for s in (1, 2)])
    algo.merge([constant_payload(algo, 2, pulls[2], 2.0, n=30)])  # peer 1 never answered
    key = algo.keys(FEATURE)[0]
    torch.testing.assert_close(algo.shared_state()[key], (10 * own[key] + 30 * 2.0) / 40)
    assert torch.equal(algo.shared_state()[algo.keys(CLASSIFIER)[0]], own[algo.keys(CLASSIFIER)[0]])


def test_dropout_merge_replaces_the_model_and_empty_merge_keeps_it():
    algo = make()
    algo.num_samples = 50
    own, feature = algo.probe()
    pulls = algo.decide([offer_from(s, own, feature) for s in (1, 2)])
    before = detach_to_cpu(algo.shared_state())
    algo.merge([])  # the chosen peer died: keep the local model
    assert all(torch.equal(v, before[k]) for k, v in algo.shared_state().items())
    (chosen,) = [s for s, keys in pulls.items() if keys]
    algo.merge([constant_payload(algo, chosen, pulls[chosen], 3.0, n=5)])
    assert all(torch.all(v == 3.0) for v in algo.shared_state().values())


# ---- the unit-feature regulariser and training ---------------------------------------------


def test_anchor_is_the_mean_unit_feature_of_self_and_every_offering_peer():
    algo = make()
    own, feature = algo.probe()
    algo.decide([offer_from(1, own, feature + 3.0), offer_from(2, peaked(algo), feature - 1.5)])
    torch.testing.assert_close(algo.anchor, feature + 0.5)


def test_regulariser_pulls_the_unit_feature_toward_the_peers_mean():
    data = separable(n=64, classes=CLASSES, shape=SHAPE)
    distances, aux_losses = [], []
    for mu in (0.0, 10.0):
        algo = make(mu=mu)
        own, feature = algo.probe()
        algo.decide([offer_from(1, own, feature + 2.0)])  # anchor = own feature + 1
        anchor = algo.anchor.clone()
        metrics = algo.train_round(data)
        distances.append(float((algo.probe()[1] - anchor).norm()))
        aux_losses.append(metrics["loss_aux"])
    # Both start ||1|| = sqrt(D) from the anchor; the regularised run ends far closer.
    assert distances[1] < 0.6 * min(distances[0], math.sqrt(len(anchor)))
    assert aux_losses[0] == 0.0 and aux_losses[1] > 0


def test_regulariser_is_a_mean_over_the_unit_feature_not_a_sum():
    """A sum over thousands of feature values made SGD overflow on Fashion-MNIST shards."""
    algo = make(mu=0.01)
    own, feature = algo.probe()
    algo.decide([offer_from(1, own, feature + 2.0)])  # every value 1 away from the anchor
    assert len(feature) > 100
    metrics = algo.train_round(separable(n=32, classes=CLASSES, shape=SHAPE))
    assert metrics["loss_aux"] == pytest.approx(1.0, rel=0.5)


def test_learning_rate_decays_per_round_and_round_state_is_cleared():
    algo = make()
    data = separable(n=32, classes=CLASSES, shape=SHAPE)
    own, feature = algo.probe()
    algo.decide([offer_from(1, own, feature)])
    first = algo.train_round(data)
    assert first["lr"] == pytest.approx(0.05) and first["dropout"] == 1.0
    assert algo.decision is None and algo.anchor is None
    second = algo.train_round(data)
    assert second["lr"] == pytest.approx(0.05 * 0.95) and "dropout" not in second
    assert algo.optimizer.param_groups[0]["momentum"] == 0.5


# ---- learning on separable data, the two-phase exchange driven by hand ---------------------


def exchange(algos: list[UAPDFL], round_: int) -> None:
    """Offers pushed to every other client, pulls served from the round's snapshot, merged."""
    offers = [
        Payload(j, round_, 0, 0, detach_to_cpu(a.offer()), a.num_samples)
        for j, a in enumerate(algos)
    ]
    snapshot = [detach_to_cpu(a.shared_state()) for a in algos]
    for i, algo in enumerate(algos):
        pulls = algo.decide([o for o in offers if o.sender != i])
        algo.merge(
            [
                Payload(j, round_, 0, 0, {k: snapshot[j][k] for k in keys}, algos[j].num_samples)
                for j, keys in pulls.items()
                if keys
            ]
        )


def test_clients_learn_their_own_classes_and_find_their_group():
    # Two groups with disjoint label sets: peers of the same group should be the similar ones.
    groups = [(0, 1), (0, 1), (2, 3), (2, 3)]
    train = [subset(separable(96, CLASSES, SHAPE, seed=i), g) for i, g in enumerate(groups)]
    test = [subset(separable(96, CLASSES, SHAPE, seed=10 + i), g) for i, g in enumerate(groups)]
    algos = [make(seed=i, threshold=0.1) for i in range(len(groups))]
    similar = []
    for round_ in range(4):
        if round_ > 0:
            exchange(algos, round_)
            similar.append([a.decision.similar for a in algos])
        for algo, data in zip(algos, train, strict=True):
            algo.train_round(data)
    accuracy = [a.evaluate(d)["acc"] for a, d in zip(algos, test, strict=True)]
    assert min(accuracy) > 0.9  # chance is 0.5 on each client's two classes
    partner = {0: 1, 1: 0, 2: 3, 3: 2}
    final = similar[-1]
    assert all(final[i] == (partner[i],) for i in range(len(groups))), final


def test_a_fresh_joiner_continues_the_ring_s_learning_rate_decay():
    joiner = make()
    joiner.joining(10)
    assert joiner.round_lr() == pytest.approx(0.05 * 0.95**10)
