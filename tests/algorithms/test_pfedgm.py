"""pFedGM: the Gaussian heads, Phase 1 over ring laps, Phase 2's personal head."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

from ring_actors.algorithms import ALGORITHMS
from ring_actors.algorithms.base import TaskSpec
from ring_actors.algorithms.pfedgm import LAP, PFedGM, PFedGMOptions
from ring_actors.algorithms.pfedgm_heads import (
    adjust_prototypes,
    class_means,
    gaussian_logits,
    navigator_logits,
    phase1_losses,
    quadratic,
)
from ring_actors.algorithms.pfedgm_personal import PersonalHead, fit_sgd, refit_biases
from ring_actors.delivery.payloads import Payload
from ring_actors.models.pfedgm_nets import FedPACCNN
from tests.helpers.synthetic import run_laps, separable

CPU = torch.device("cpu")
SHAPE = (1, 16, 16)  # small images keep the CNN fast on two cores
CLASSES = 4


def make(seed=1, shared_seed=0, batch=16, epochs=1, **options) -> PFedGM:
    task = TaskSpec(CLASSES, SHAPE, epochs, batch, CPU, seed, shared_seed)
    return PFedGM(PFedGMOptions(**options), task)


def snapshot(algo: PFedGM) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in algo.model_state().items()}


def assert_state_close(state: dict, expected: dict) -> None:
    assert set(state) == set(expected)
    for name, value in expected.items():
        torch.testing.assert_close(state[name], value, rtol=1e-5, atol=1e-5, msg=name)


def test_registry_names_pfedgm():
    assert ALGORITHMS["pfedgm"] is PFedGM


def test_options_reject_bad_values():
    for q in (0.0, 1.5):
        with pytest.raises(ValueError, match=r"^participation: must be in \(0, 1\]"):
            PFedGMOptions(participation=q)
    with pytest.raises(ValueError, match="^proto_alpha: must be"):
        PFedGMOptions(proto_alpha=2.0)
    with pytest.raises(ValueError, match="^lbfgs_steps: must be"):
        PFedGMOptions(lbfgs_steps=0)


def test_generator_is_the_papers_cnn():
    """106,400 body parameters for CIFAR and 115,776 for EMNIST, both ending in 128 features."""
    cifar, emnist = FedPACCNN(3, 32), FedPACCNN(1, 28)
    assert sum(p.numel() for p in cifar.parameters()) == 106_400
    assert sum(p.numel() for p in emnist.parameters()) == 115_776
    assert cifar(torch.zeros(2, 3, 32, 32)).shape == (2, 128)
    assert emnist(torch.zeros(2, 1, 28, 28)).shape == (2, 128)


# ---- heads and Phase-1 objectives ------------------------------------------------------------


def test_navigator_logits_known_values():
    z = torch.tensor([[1.0, 0.0]])
    means = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    biases = torch.tensor([0.0, 0.5])
    torch.testing.assert_close(navigator_logits(z, means, biases), torch.tensor([[0.0, -0.5]]))


def test_navigator_is_a_linear_layer_up_to_a_per_sample_constant():
    g = torch.Generator().manual_seed(0)
    z, means, biases = (torch.randn(s, generator=g) for s in ((5, 8), (3, 8), (3,)))
    linear = z @ means.T - 0.5 * means.square().sum(1) + biases
    gap = navigator_logits(z, means, biases) - linear
    torch.testing.assert_close(gap, (-0.5 * z.square().sum(1, keepdim=True)).expand(5, 3))
    torch.testing.assert_close(
        navigator_logits(z, means, biases).softmax(1), linear.softmax(1), atol=1e-6, rtol=1e-5
    )


def test_gaussian_logits_known_value_and_identity_case():
    z, means, biases = torch.tensor([[1.0, 1.0]]), torch.zeros(1, 2), torch.tensor([0.3])
    value = gaussian_logits(z, means, torch.tensor([[2.0, 1.0]]), biases)
    torch.testing.assert_close(value, torch.tensor([[-1.2]]))  # -1/2 (2 + 1) + 0.3
    g = torch.Generator().manual_seed(1)
    z, means, biases = (torch.randn(s, generator=g) for s in ((4, 6), (3, 6), (3,)))
    torch.testing.assert_close(
        gaussian_logits(z, means, torch.ones(3, 6), biases), navigator_logits(z, means, biases)
    )


def test_shared_objective_gradients_follow_the_closed_form():
    """dH/dmu_y = (1 - P_y)(mu_y - z), dH/dmu_k = -P_k (mu_k - z), dH/db = P - onehot(y)."""
    g = torch.Generator().manual_seed(2)
    z = torch.randn(1, 5, generator=g)
    means = torch.randn(3, 5, generator=g, requires_grad=True)
    biases = torch.randn(3, generator=g, requires_grad=True)
    y = torch.tensor([1])
    F.cross_entropy(navigator_logits(z, means, biases), y).backward()
    p = navigator_logits(z, means, biases).softmax(1)[0].detach()
    onehot = F.one_hot(y, 3)[0].float()
    torch.testing.assert_close(means.grad, (p - onehot).unsqueeze(1) * (z - means.detach()))
    torch.testing.assert_close(biases.grad, p - onehot)


def test_local_objective_known_value():
    z = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    prototypes = torch.tensor([[0.0, 0.0], [3.0, 3.0]])
    _, local, _ = phase1_losses(
        z, torch.tensor([0, 1]), torch.zeros(2, 2), torch.zeros(2), torch.ones(2, 2), prototypes
    )
    torch.testing.assert_close(local, torch.tensor(1.5))  # (1 + 4 + 0 + 1) / (2 samples * d=2)


def test_statistic_loss_trains_only_the_precisions():
    g = torch.Generator().manual_seed(3)
    leaves = [torch.randn(s, generator=g, requires_grad=True) for s in ((6, 4), (3, 4), (3,))]
    z, means, biases = leaves
    precisions = torch.ones(3, 4, requires_grad=True)
    y = torch.tensor([0, 1, 2, 0, 1, 2])
    shared, local, statistic = phase1_losses(z, y, means, biases, precisions, torch.zeros(3, 4))
    statistic.backward(retain_graph=True)
    assert precisions.grad is not None and precisions.grad.abs().sum() > 0
    assert all(t.grad is None for t in leaves)
    precisions.grad = None
    (shared + local).backward()
    assert precisions.grad is None
    assert all(t.grad is not None for t in leaves)


def test_prototype_adjustment_known_values():
    prototypes = torch.tensor([[0.0], [5.0]])
    z, y = torch.tensor([[2.0], [4.0]]), torch.tensor([0, 0])
    adjust_prototypes(prototypes, z, y, alpha=0.5)
    # class 0: v - 0.5 * ((0 - 2) + (0 - 4)) / (1 + 2) = 1; class 1 is not in the batch
    torch.testing.assert_close(prototypes, torch.tensor([[1.0], [5.0]]))
    adjust_prototypes(prototypes, z, y, alpha=0.0)
    torch.testing.assert_close(prototypes, torch.tensor([[1.0], [5.0]]))


def test_class_means_fall_back_for_absent_classes():
    z = torch.tensor([[1.0, 1.0], [3.0, 5.0], [7.0, 7.0]])
    means, counts = class_means(z, torch.tensor([0, 0, 2]), torch.full((3, 2), -1.0))
    torch.testing.assert_close(means, torch.tensor([[2.0, 3.0], [-1.0, -1.0], [7.0, 7.0]]))
    assert counts.tolist() == [2, 0, 1]


# ---- Phase 2's personal head -----------------------------------------------------------------


def random_head(seed: int = 4, classes: int = 3, dim: int = 5) -> PersonalHead:
    g = torch.Generator().manual_seed(seed)

    def rand(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    head = PersonalHead(
        rand(classes, dim), rand(classes), rand(classes, dim).exp(), rand(classes, dim), lam=1.0
    )
    with torch.no_grad():
        head.mean_offsets.copy_(0.3 * rand(classes, dim))
        head.bias_offsets.copy_(rand(classes))
        head.global_scale.copy_(rand(dim).exp())
        head.local_scale.copy_(rand(dim).exp())
    return head


def test_fused_head_equals_the_sum_of_its_terms():
    head = random_head()
    z = torch.randn(7, 5, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    means, precisions, biases = head.fused()
    with torch.no_grad():
        torch.testing.assert_close(quadratic(z, means, precisions) + biases, head(z))


def test_fused_head_known_value():
    """d = 1, lam = 1/2 (local precision 2 lam / d = 1): prior N(0, 1) and local mean 2 fuse
    into mean 1, precision 2; the bias loses 1/2 (0 + 4 - 2) = 1."""
    one = torch.ones(1, 1)
    head = PersonalHead(0 * one, torch.tensor([0.2]), one, 2 * one, lam=0.5)
    means, precisions, biases = head.fused()
    assert (means.item(), precisions.item()) == (1.0, 2.0)
    torch.testing.assert_close(biases, torch.tensor([-0.8]))
    with torch.no_grad():  # at z = 1: -1/2 * 1 - 1/2 * 1 + 0.2
        torch.testing.assert_close(head(torch.ones(1, 1)), torch.tensor([[-0.8]]))


def test_head_starts_as_global_plus_local_terms():
    g = torch.Generator().manual_seed(6)
    means, biases, local = torch.randn(3, 4, generator=g), torch.randn(3), torch.randn(3, 4)
    precisions = torch.rand(3, 4, generator=g) + 0.5
    head = PersonalHead(means, biases, precisions, local, lam=1.0)
    z = torch.randn(5, 4, generator=g)
    expected = gaussian_logits(z, means, precisions, biases) - (1 / 4) * torch.cdist(z, local) ** 2
    with torch.no_grad():
        torch.testing.assert_close(head(z), expected, atol=1e-5, rtol=1e-5)


def test_sgd_fits_the_whole_head_and_lbfgs_only_the_biases():
    g = torch.Generator().manual_seed(7)
    z, y = torch.randn(60, 4, generator=g), torch.randint(0, 3, (60,), generator=g)
    head = PersonalHead(
        torch.randn(3, 4, generator=g),
        torch.zeros(3),
        torch.ones(3, 4),
        torch.randn(3, 4, generator=g),
        lam=1.0,
    )
    optimizer = torch.optim.SGD(head.parameters(), lr=0.05, momentum=0.5)
    fit_sgd(head, z, y, optimizer, 2, 16, 1e-4, torch.Generator().manual_seed(0))
    fitted = {k: v.detach().clone() for k, v in head.named_parameters()}
    assert all(
        not torch.equal(v, torch.ones_like(v)) and v.abs().sum() > 0 for v in fitted.values()
    )
    before = F.cross_entropy(head(z), y).item()
    refit_biases(head, z, y, lr=0.05, max_iter=10, steps=5)
    assert F.cross_entropy(head(z), y).item() < before
    for name, value in head.named_parameters():
        assert torch.equal(value, fitted[name]) == (name != "bias_offsets"), name


# ---- the algorithm ---------------------------------------------------------------------------


def test_laps_and_sharing():
    algo = make()
    assert [algo.laps(r) for r in (0, 7)] == [(LAP,), (LAP,)]
    assert algo.shared_state() == {}  # everything moves in the ring lap
    handed = algo.hand_off_state()
    assert {"navigator.means", "navigator.biases", "extractor.precisions"} <= set(handed)
    assert handed["extractor.precisions"].eq(1).all()  # nu0 = identity precisions


def test_clients_start_from_one_shared_model():
    a, b = make(seed=1), make(seed=2)
    assert_state_close(a.model_state(), b.model_state())
    c = make(seed=1, shared_seed=5)
    assert not torch.equal(a.model_state()["navigator.means"], c.model_state()["navigator.means"])


def test_participation_draws_are_reproducible_and_at_rate_q():
    rounds = range(250)
    a, again, other = make(seed=7, participation=0.3), make(seed=7), make(seed=8)
    draws = [a.sampled(r) for r in rounds]
    assert draws == [again.sampled(r) for r in rounds]  # a function of seeds and round only
    assert draws != [other.sampled(r) for r in rounds]
    reseeded = make(seed=7, shared_seed=1)
    assert draws != [reseeded.sampled(r) for r in rounds]
    clients = [make(seed=s, participation=0.3) for s in range(1, 21)]
    rate = sum(c.sampled(r) for c in clients for r in range(500)) / (20 * 500)
    assert abs(rate - 0.3) < 0.02  # 10,000 draws: std 0.0046
    assert all(make(participation=1.0).sampled(r) for r in range(20))


def round_with_some_participants(clients: list[PFedGM]) -> int:
    """The first round whose draw samples two or more, but not all, of ``clients``."""
    for r in range(100):
        picked = sum(c.sampled(r) for c in clients)
        if 2 <= picked < len(clients):
            return r
    raise AssertionError("no mixed round in 100")


def test_phase1_lap_is_the_sample_weighted_mean_of_the_participants():
    sizes = (24, 40, 56, 72)
    clients = [make(seed=s, participation=0.5) for s in range(1, 5)]
    data = [separable(n, CLASSES, SHAPE, seed=i) for i, n in enumerate(sizes)]
    r = round_with_some_participants(clients)
    weighted, total = {}, 0.0
    g = torch.Generator().manual_seed(0)
    for client, d, n in zip(clients, data, sizes, strict=True):
        client.next_round = r
        metrics = client.train_round(d)
        assert metrics["sampled"] == float(client.sampled(r))
        if client.sampled(r):
            assert "loss_shared" in metrics
            total += n
            for k, v in client.model_state().items():
                weighted[k] = weighted.get(k, 0) + n * v.clone()
        else:  # a non-participant's values must not leak into the average
            assert client.contribute(LAP, r) == {}
            with torch.no_grad():
                for v in client.model_state().values():
                    v.add_(torch.randn(v.shape, generator=g))
    expected = {k: v / total for k, v in weighted.items()}
    run_laps(clients, r)
    for client in clients:
        assert_state_close(client.model_state(), expected)
        assert_state_close(client.hand_off_state(), expected)
        assert client.next_round == r + 1


def test_lap_without_contributors_keeps_the_global_model():
    clients = [make(seed=s, participation=0.05) for s in (1, 2)]
    r = next(r for r in range(100) if not any(c.sampled(r) for c in clients))
    start = snapshot(clients[0])
    for client in clients:
        client.next_round = r
        assert client.train_round(separable(16, CLASSES, SHAPE)) == {"sampled": 0.0}
        with torch.no_grad():
            client.means.add_(1.0)
    run_laps(clients, r)
    for client in clients:
        assert_state_close(client.model_state(), start)
    empty = {
        "weight": torch.tensor(0.0),
        "navigator.means": torch.zeros_like(start["navigator.means"]),
    }
    clients[0].apply_lap(LAP, r + 1, empty, [])  # contributors with no samples
    assert_state_close(clients[0].model_state(), start)


def test_phase2_runs_at_evaluation_and_switches_by_option():
    data, test = separable(64, CLASSES, SHAPE, seed=0), separable(32, CLASSES, SHAPE, seed=1)
    heads = {}
    for sgd, lbfgs in ((True, True), (True, False), (False, True)):
        algo = make(participation=1.0, phase2_sgd=sgd, phase2_lbfgs=lbfgs)
        algo.train_round(data)
        assert algo.personal is None
        result = algo.evaluate(test)
        assert set(result) == {"acc", "acc_global", "acc_navigator"}
        heads[sgd, lbfgs] = algo.personal
    full, sgd_only, lbfgs_only = heads[True, True], heads[True, False], heads[False, True]
    assert torch.equal(full.mean_offsets, sgd_only.mean_offsets)  # identical runs up to GA
    assert not torch.equal(full.bias_offsets, sgd_only.bias_offsets)
    assert lbfgs_only.mean_offsets.eq(0).all() and lbfgs_only.global_scale.eq(1).all()
    assert lbfgs_only.bias_offsets.abs().sum() > 0


def test_absent_classes_take_the_navigator_mean_in_phase2():
    algo = make(participation=1.0)
    two_classes = separable(32, 2, SHAPE)  # labels 0 and 1 only
    algo.train_round(two_classes)
    algo.personalize(two_classes)
    torch.testing.assert_close(algo.personal.local_means[2:], algo.means.detach()[2:])


def test_joiner_installs_the_global_model():
    source = make(seed=1, participation=1.0)
    source.train_round(separable(32, CLASSES, SHAPE))
    run_laps([source], 0)
    joiner = make(seed=9, shared_seed=3)
    joiner.init_from(Payload(0, 4, 0, -1, source.hand_off_state()))
    assert_state_close(joiner.hand_off_state(), source.hand_off_state())
    assert joiner.next_round == 5 and joiner.personal is None
    images = separable(8, CLASSES, SHAPE, seed=2)
    x = images.normalise(images.x)
    ours, theirs = joiner.predict(x), source.predict(x)
    for name in ("acc_global", "acc_navigator"):
        torch.testing.assert_close(ours[name], theirs[name])
    with pytest.raises(KeyError, match="lacks"):
        joiner.init_from(Payload(0, 4, 0, -1, {"navigator.means": torch.zeros(4, 1)}))


def test_learns_separable_data_over_ring_laps():
    clients = [make(seed=s, participation=1.0) for s in (1, 2, 3)]
    data = [separable(48, CLASSES, SHAPE, seed=s) for s in range(3)]
    test = separable(64, CLASSES, SHAPE, seed=10)
    for r in range(3):
        for client, d in zip(clients, data, strict=True):
            client.train_round(d)
        run_laps(clients, r)
    results = [client.evaluate(test) for client in clients]
    assert all(client.personal is not None for client in clients)
    for result in results:
        assert result["acc"] > 0.6 and result["acc_global"] > 0.6  # chance is 0.25


def test_a_fresh_joiner_draws_participation_for_the_ring_s_rounds():
    joiner = make(seed=9, participation=0.5)
    joiner.joining(7)
    joiner.train_round(separable(16, CLASSES, SHAPE))
    assert joiner.next_round == 8
