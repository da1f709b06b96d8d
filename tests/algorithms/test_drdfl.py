"""DRDFL's losses, merge rules, shared state and training checked against known values."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from torch import distributions as D
from torch.nn import functional as F

from ring_actors.algorithms.base import TaskSpec
from ring_actors.algorithms.drdfl import (
    DRDFL,
    DRDFLOptions,
    ema,
    gmm_logits,
    gmm_loss,
    kl_standard_normal,
    uniform_cross_entropy,
)
from ring_actors.delivery.payloads import Payload, detach_to_cpu
from tests.helpers.synthetic import separable

CPU = torch.device("cpu")
SMALL = {"latent_personal": 8, "latent_learngene": 8}


def make_task(shape=(1, 28, 28), classes=4, epochs=1, batch=32, seed=1) -> TaskSpec:
    return TaskSpec(classes, shape, epochs, batch, CPU, seed, shared_seed=0)


def make(shape=(1, 28, 28), classes=4, seed=1, epochs=1, **options) -> DRDFL:
    opts = DRDFLOptions(**{**SMALL, **options})
    return DRDFL(opts, make_task(shape, classes, epochs, seed=seed))


def payload(algo: DRDFL, sender: int = 0) -> Payload:
    return Payload(sender, 0, 0, 0, detach_to_cpu(algo.shared_state()))


# ---- pure loss functions -------------------------------------------------------------------


def test_gmm_logits_match_hand_computed_and_cross_entropy():
    g = torch.Generator().manual_seed(0)
    z, means = torch.randn(5, 3, generator=g), torch.randn(4, 3, generator=g)
    variances = torch.rand(4, 3, generator=g) + 0.5
    y = torch.tensor([0, 1, 2, 3, 1])
    expected = torch.empty(5, 4)
    for i in range(5):
        for k in range(4):
            d = z[i] - means[k]
            maha = (d * d / variances[k]).sum()
            expected[i, k] = -0.5 * maha - 0.5 * torch.log(torch.prod(variances[k]))
    logits = gmm_logits(z, means, variances)
    torch.testing.assert_close(logits, expected)
    loss_cls, loss_log = gmm_loss(z, y, means, variances)
    torch.testing.assert_close(loss_cls, F.cross_entropy(expected, y))
    nll = -D.Normal(means[y], variances[y].sqrt()).log_prob(z).sum(1).mean()
    torch.testing.assert_close(loss_log, nll)


def test_kl_matches_torch_distributions():
    g = torch.Generator().manual_seed(1)
    mu, logvar = torch.randn(6, 5, generator=g), torch.randn(6, 5, generator=g)
    q = D.Normal(mu, (0.5 * logvar).exp())
    expected = D.kl_divergence(q, D.Normal(torch.zeros(5), torch.ones(5))).sum(1)
    torch.testing.assert_close(kl_standard_normal(mu, logvar), expected)


def test_uniform_cross_entropy_minimal_at_uniform():
    assert float(uniform_cross_entropy(torch.zeros(3, 10))) == pytest.approx(math.log(10))
    assert float(uniform_cross_entropy(torch.tensor([[5.0, 0.0, 0.0]]))) > math.log(3)


def test_ema_formula():
    local, received = torch.tensor([1.0, 2.0]), torch.tensor([3.0, 6.0])
    torch.testing.assert_close(ema(local, received, 0.75), torch.tensor([1.5, 3.0]))


# ---- shapes and shared state ---------------------------------------------------------------


@pytest.mark.parametrize(("shape", "backbone"), [((1, 28, 28), "cnn"), ((3, 32, 32), "cnn")])
def test_output_shapes(shape, backbone):
    algo = make(shape, classes=5, backbone=backbone)
    x = torch.randn(3, *shape)
    z_p = algo.persona(x)
    mu, logvar = algo.learngene(x)
    assert z_p.shape == (3, 8) and mu.shape == logvar.shape == (3, 8)
    assert algo.decoder(torch.cat([z_p, mu], 1)).shape == x.shape
    assert algo.adversary(mu).shape == (3, 5)
    out = algo.predict(x)
    assert set(out) == {"acc", "acc_decoder", "acc_gmm"}
    assert all(v.shape == (3, 5) for v in out.values())
    assert algo.class_means.shape == algo.class_variances().shape == (5, 8)


def test_shared_state_keys_and_default_size():
    algo = DRDFL(DRDFLOptions(), make_task((3, 32, 32), classes=10))
    state = algo.shared_state()
    learngene = {k for k in state if k.startswith("learngene.")}
    assert set(state) == learngene | {"class_means", "class_vars"}
    assert learngene == {
        "learngene." + k for k, v in algo.learngene.state_dict().items() if v.is_floating_point()
    }
    total = sum(v.numel() for v in state.values())
    assert 550_000 <= total <= 620_000, total  # the papers' "0.58 M"
    torch.testing.assert_close(state["class_vars"], algo.class_variances())


def test_shared_state_holds_no_private_tensor():
    algo = make()
    private = [algo.persona, algo.decoder, algo.adversary, algo.classifier]
    private_ptrs = {t.data_ptr() for m in private for t in [*m.parameters(), *m.buffers()]} | {
        algo.class_logvar.data_ptr()
    }
    state = algo.shared_state()
    assert not private_ptrs & {v.data_ptr() for v in state.values()}
    learngene_ptrs = {t.data_ptr() for t in algo.learngene.state_dict().values()}
    assert {state[k].data_ptr() for k in state if k.startswith("learngene.")} <= learngene_ptrs
    assert state["class_means"].data_ptr() == algo.class_means.data_ptr()


def test_shared_parts_identical_across_clients_private_parts_not():
    a, b = make(seed=1), make(seed=2)
    for k, v in a.shared_state().items():
        torch.testing.assert_close(v, b.shared_state()[k])
    assert not torch.equal(a.persona.fc.weight, b.persona.fc.weight)


# ---- merge ---------------------------------------------------------------------------------


def _perturbed(seed: int) -> DRDFL:
    """A client whose shared state differs from the common initialisation."""
    algo = make(seed=seed)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for v in algo._learngene_state().values():
            v.add_(torch.randn(v.shape, generator=g))
        algo.class_means.add_(torch.randn(algo.class_means.shape, generator=g))
        algo._set_variances(torch.rand(algo.class_means.shape, generator=g) + 0.5)
    return algo


@pytest.mark.parametrize("mode", ["average", "replace"])
def test_merge_learngene_and_class_stats(mode):
    me = DRDFL(DRDFLOptions(**SMALL, alpha=0.9, merge=mode), make_task())
    senders = [_perturbed(2), _perturbed(3)]
    received = [payload(s, i) for i, s in enumerate(senders)]
    own = {k: v.clone() for k, v in me.shared_state().items()}
    me.merge(received)
    state = me.shared_state()
    for key in own:
        incoming = torch.stack([p.tensors[key] for p in received])
        if key.startswith("learngene."):
            pool = torch.cat([own[key][None], incoming]) if mode == "average" else incoming
            torch.testing.assert_close(state[key], pool.mean(0), rtol=0, atol=0)
        else:
            torch.testing.assert_close(state[key], 0.9 * own[key] + 0.1 * incoming.mean(0))


def test_merge_empty_is_noop_and_resets_learngene_optimizer():
    algo = make()
    before = {k: v.clone() for k, v in algo.shared_state().items()}
    algo.merge([])
    for k, v in algo.shared_state().items():
        assert torch.equal(v, before[k])
    algo.train_round(separable(32))
    assert algo.optimizers["learngene"].state
    algo.merge([payload(_perturbed(5))])
    assert not algo.optimizers["learngene"].state
    assert algo.optimizers["persona"].state  # private optimiser state survives


# ---- late joiner ---------------------------------------------------------------------------


def test_init_from_copies_and_freezes_priors_for_t_init_rounds():
    data = separable(32)
    source = _perturbed(7)
    joiner = make(seed=8, t_init=2)
    joiner.init_from(payload(source))
    for k, v in source.shared_state().items():
        torch.testing.assert_close(joiner.shared_state()[k], v)
    assert not torch.equal(joiner.persona.fc.weight, source.persona.fc.weight)

    def stats() -> tuple[torch.Tensor, torch.Tensor]:
        return joiner.class_means.detach().clone(), joiner.class_variances().detach().clone()

    other = payload(_perturbed(9))
    for _ in range(2):  # frozen: neither training nor merging moves the priors
        means, variances = stats()
        joiner.merge([other])
        joiner.train_round(data)
        assert torch.equal(joiner.class_means, means)
        assert torch.equal(joiner.class_variances(), variances)
    assert not joiner.priors_frozen
    means, variances = stats()
    joiner.merge([other])
    assert not torch.equal(joiner.class_means, means)
    means, _ = stats()
    joiner.train_round(data)
    assert not torch.equal(joiner.class_means, means)


# ---- training ------------------------------------------------------------------------------


def test_training_lowers_losses_and_beats_chance():
    torch.manual_seed(0)
    data = separable(128)
    algo = make(epochs=2)
    first = algo.train_round(data)
    for _ in range(2):
        last = algo.train_round(data)
    assert set(first) >= {"loss_pr", "loss_gl", "loss_rec", "loss_ce"}
    for key in ("loss_pr", "loss_rec", "loss_ce"):
        assert last[key] < first[key], key
    acc = algo.evaluate(separable(64, seed=1))
    assert acc["acc"] > 0.5 and set(acc) == {"acc", "acc_decoder", "acc_gmm"}  # chance is 0.25
    assert float(algo.class_variances().detach().min()) >= algo.options.var_floor * (1 - 1e-6)


@pytest.mark.parametrize(
    "options",
    [
        {"merge": "replace"},
        {"routing": "literal"},
        {"routing": "learngene"},
        {"prior_init": "client"},
        {"use_pr": False},
        {"use_gl": False},
        {"optimizer": "sgd"},
    ],
)
def test_variants_train(options):
    data = separable(32, shape=(3, 32, 32))
    a, b = make((3, 32, 32), **options), make((3, 32, 32), seed=2, **options)
    a.merge([payload(b)])
    losses = a.train_round(data)
    assert all(math.isfinite(v) for v in losses.values())


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("latent_personal", 0),
        ("latent_learngene", 0),
        ("alpha", 1.5),
        ("noise_var", -1.0),
        ("var_floor", 0.0),
        ("merge", "mix"),
        ("routing", "other"),
        ("prior_init", "each"),
        ("t_init", -1),
        ("lambda_rec", -1.0),
        ("lambda_pr", -0.5),
    ],
)
def test_invalid_options_name_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        DRDFLOptions(**{field: value})


def test_options_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        DRDFLOptions().alpha = 0.5  # type: ignore[misc]


# ---- the readings the papers leave open ----------------------------------------------------


def _grads_after_one_step(**options) -> dict[str, bool]:
    """Which modules L_rec alone sends a gradient to (every other loss weighted 0)."""
    algo = make(use_pr=False, use_gl=False, **options)
    x, y = next(separable(16).batches(16, shuffle=False))
    algo.classifier.requires_grad_(False)  # L_ce is not the question here
    algo._step(x, y)
    return {
        name: any(p.grad is not None and p.grad.abs().sum() > 0 for p in module.parameters())
        for name, module in (
            ("psi", algo.persona),
            ("phi", algo.learngene),
            ("theta", algo.decoder),
        )
    }


@pytest.mark.parametrize(
    ("routing", "expected"),
    [
        ("elbo", {"psi": True, "phi": True, "theta": True}),
        ("learngene", {"psi": False, "phi": True, "theta": True}),
        ("literal", {"psi": False, "phi": False, "theta": True}),
    ],
)
def test_routing_decides_which_encoders_the_reconstruction_trains(routing, expected):
    assert _grads_after_one_step(routing=routing) == expected


def test_class_gaussians_start_alike_unless_drawn_per_client():
    shared = [make(seed=s).class_means.detach() for s in (1, 2)]
    torch.testing.assert_close(shared[0], shared[1])
    own = [make(seed=s, prior_init="client").class_means.detach() for s in (1, 2)]
    assert not torch.allclose(own[0], own[1])
    torch.testing.assert_close(own[0], make(seed=1, prior_init="client").class_means.detach())
    # φ stays common: only the anchors change
    a, b = make(seed=1, prior_init="client"), make(seed=2, prior_init="client")
    theirs = b.learngene.state_dict()
    for k, va in a.learngene.state_dict().items():
        torch.testing.assert_close(va, theirs[k], msg=k)


def test_three_predictions_agree_with_a_hand_computation():
    """Two images, K = 3, d_p = 2: the GMM posterior computed by hand from set means and
    variances, and the decoder path as f_ω applied to θ(ψ(x), μ_φ(x)) step by step."""
    algo = make(classes=3, latent_personal=2, latent_learngene=2)
    algo.train_round(separable(32, classes=3))  # BatchNorm statistics and weights move off init
    images = separable(2, classes=3, seed=5)
    x, _ = next(images.batches(2, shuffle=False))
    with torch.no_grad():
        algo.class_means.copy_(torch.tensor([[0.0, 0.0], [2.0, 0.0], [0.0, -3.0]]))
        algo.class_logvar.copy_(torch.tensor([[0.0, 0.0], [0.0, 0.0], [math.log(4.0), 0.0]]))
    out = algo.predict(x)
    for m in algo._modules():
        m.eval()
    with torch.no_grad():
        z = algo.persona(x)
        mu, _ = algo.learngene(x)
        by_hand = []
        for i in range(2):
            z0, z1 = float(z[i, 0]), float(z[i, 1])
            by_hand.append(
                [
                    -0.5 * (z0**2 + z1**2),
                    -0.5 * ((z0 - 2) ** 2 + z1**2),
                    -0.5 * (z0**2 / 4 + (z1 + 3) ** 2) - 0.5 * math.log(4.0),
                ]
            )
        torch.testing.assert_close(out["acc_gmm"], torch.tensor(by_hand))
        torch.testing.assert_close(out["acc"], algo.classifier(x))
        decoded = algo.decoder(torch.cat([z, mu], dim=1))  # the mean of z_l, no sample
        torch.testing.assert_close(out["acc_decoder"], algo.classifier(decoded))
    # evaluate scores each path by its argmax
    hand_labels = torch.tensor(by_hand).argmax(1)
    scores = algo.evaluate(dataclasses.replace(images, y=hand_labels))
    assert scores["acc_gmm"] == 1.0
    other = (hand_labels + 1) % 3
    assert algo.evaluate(dataclasses.replace(images, y=other))["acc_gmm"] == 0.0


def test_diagnostics_measure_what_blanking_z_l_costs_the_reconstruction():
    algo = make()
    data = separable(32)
    for _ in range(2):
        algo.train_round(data)
    d = algo.diagnostics(data)
    for m in algo._modules():
        m.eval()
    with torch.no_grad():
        x, _ = next(data.batches(32, shuffle=False))
        z_p, (mu, _) = algo.persona(x), algo.learngene(x)
        rec = algo.decoder(torch.cat([z_p, mu], 1))
        blank = algo.decoder(torch.cat([z_p, torch.zeros_like(mu)], 1))
        expected = (rec - x).square().flatten(1).sum(1).mean()
        expected_blank = (blank - x).square().flatten(1).sum(1).mean()
    assert d["rec_loss"] == pytest.approx(float(expected), rel=1e-4)
    assert d["rec_loss_blank_zl"] == pytest.approx(float(expected_blank), rel=1e-4)
    assert d["rec_loss_zl_gain"] == pytest.approx(d["rec_loss_blank_zl"] - d["rec_loss"])
