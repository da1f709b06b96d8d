"""DRDFL: share only a small Learngene encoder and class Gaussians; keep everything else private.

Each client trains a VAE-like model (private PersonaNet ψ with a class-conditional Gaussian
mixture prior, shared Learngene φ regularised by KL and a uniform-label adversary ϑ, private
decoder θ) and a private classifier ω on real and noisy reconstructed images. Only φ and the
class Gaussians (means and diagonal variances) travel around the ring.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn
from torch.func import functional_call
from torch.nn import functional as F

from ring_actors.algorithms.base import Algorithm, AlgorithmOptions, TaskSpec
from ring_actors.algorithms.staleness import staleness_weights, weighted_average
from ring_actors.data.images import LabelledImages
from ring_actors.delivery.payloads import Payload
from ring_actors.models import build_backbone
from ring_actors.models.drdfl_nets import Adversary, Decoder, Learngene, PersonaNet

LOSS_NAMES = (
    "loss_pr",
    "loss_cls",
    "loss_log",
    "loss_gl",
    "loss_kl",
    "loss_adv",
    "loss_adv_u",
    "loss_rec",
    "loss_ce",
)
LEARNGENE_PREFIX = "learngene."


@dataclass(frozen=True)
class DRDFLOptions(AlgorithmOptions):
    """DRDFL hyperparameters; defaults follow the papers and the notes' recommendations."""

    latent_personal: int = 64
    latent_learngene: int = 100  # about 0.58 M shared values for 32x32x3, as reported
    alpha: float = 0.99  # EMA weight on the LOCAL class statistics
    noise_var: float = 0.15
    var_floor: float = 1e-3
    merge: Literal["average", "replace"] = "average"
    # A received Learngene s rounds old weighs (1 + s) ** -staleness_exponent
    # (ring_actors.algorithms.staleness); 0: the plain average.
    staleness_exponent: float = 0.0
    # Which encoders L_rec trains: "elbo" ψ, φ and θ; "learngene" φ and θ, ψ by L_PR alone
    # (000's Algorithm 1 for ψ: the decoder must then read z_l from the shared φ);
    # "literal" θ alone.
    routing: Literal["elbo", "learngene", "literal"] = "elbo"
    # Class Gaussians' means: "shared" drawn alike on every client (one seed), "client" drawn
    # from each client's own seed (what the EMA then mixes is no longer small drifts).
    prior_init: Literal["shared", "client"] = "shared"
    t_init: int = 5
    use_pr: bool = True
    use_gl: bool = True
    lambda_rec: float = 1.0
    lambda_kl: float = 1.0
    lambda_adv: float = 1.0
    lambda_pr: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("latent_personal", "latent_learngene"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be an integer >= 1")
        if not 0.0 <= self.alpha <= 1.0:
            raise ValueError("alpha must be in [0, 1]")
        if self.noise_var < 0:
            raise ValueError("noise_var must be >= 0")
        if not self.var_floor > 0:
            raise ValueError("var_floor must be > 0")
        if not self.staleness_exponent >= 0:
            raise ValueError(f"staleness_exponent: must be >= 0, got {self.staleness_exponent}")
        if self.merge not in ("average", "replace"):
            raise ValueError(f"merge must be 'average' or 'replace', got {self.merge!r}")
        if self.routing not in ("elbo", "learngene", "literal"):
            raise ValueError(
                f"routing must be 'elbo', 'learngene' or 'literal', got {self.routing!r}"
            )
        if self.prior_init not in ("shared", "client"):
            raise ValueError(f"prior_init must be 'shared' or 'client', got {self.prior_init!r}")
        if self.t_init < 0:
            raise ValueError("t_init must be an integer >= 0")
        for name in ("lambda_rec", "lambda_kl", "lambda_adv", "lambda_pr"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")


def gmm_logits(z: torch.Tensor, means: torch.Tensor, variances: torch.Tensor) -> torch.Tensor:
    """Class logits of a diagonal GMM with uniform prior: -½ Mahalanobis - ½ log|Σ_k|, (B, K)."""
    diff = z.unsqueeze(1) - means.unsqueeze(0)
    return -0.5 * ((diff.square() / variances).sum(-1) + variances.log().sum(-1))


def gmm_loss(
    z: torch.Tensor, y: torch.Tensor, means: torch.Tensor, variances: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Batch means of L_cls (CE of the GMM posterior) and L_log (NLL under class y's Gaussian)."""
    logits = gmm_logits(z, means, variances)
    loss_cls = F.cross_entropy(logits, y)
    log_2pi = z.shape[1] * math.log(2 * math.pi)
    loss_log = (0.5 * log_2pi - logits.gather(1, y.unsqueeze(1))).mean()
    return loss_cls, loss_log


def kl_standard_normal(mu: torch.Tensor, logvar: torch.Tensor) -> torch.Tensor:
    """KL(N(mu, diag exp(logvar)) || N(0, I)) per sample, shape (B,)."""
    return 0.5 * (mu.square() + logvar.exp() - logvar - 1).sum(-1)


def uniform_cross_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Batch mean of -(1/K) Σ_k log softmax(logits)_k: minimal at the uniform prediction."""
    return -F.log_softmax(logits, dim=1).mean()


def ema(local: torch.Tensor, received: torch.Tensor, alpha: float) -> torch.Tensor:
    """Exponential moving average keeping weight ``alpha`` on the local value."""
    return alpha * local + (1 - alpha) * received


@contextmanager
def _seeded(seed: int) -> Iterator[None]:
    """Deterministic CPU initialisation without disturbing the global RNG."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


class DRDFL(Algorithm):
    """One DRDFL client: ψ, θ, ϑ, ω private; φ and the class Gaussians shared.

    Class variances are stored as log-variances (for unconstrained gradient steps) projected
    onto ``var >= var_floor`` after each step; EMA merges act on the variances themselves.
    """

    Options = DRDFLOptions

    def __init__(self, options: DRDFLOptions, task: TaskSpec) -> None:
        super().__init__(options, task)
        shape, classes = task.input_shape, task.num_classes
        d_p, d_l = options.latent_personal, options.latent_learngene
        with _seeded(task.shared_seed):  # identical on every client: φ and the class anchors
            self.learngene = Learngene(shape, d_l).to(self.device)
            means = torch.randn(classes, d_p)
        if options.prior_init == "client":
            with _seeded(task.seed):
                means = torch.randn(classes, d_p)
        self.class_means = nn.Parameter(means.to(self.device))
        self.class_logvar = nn.Parameter(torch.zeros(classes, d_p, device=self.device))
        with _seeded(task.seed):
            self.persona = PersonaNet(shape, d_p).to(self.device)
            self.decoder = Decoder(shape, d_p + d_l).to(self.device)
            self.adversary = Adversary(d_l, classes).to(self.device)
            self.classifier = build_backbone(options.backbone, shape, classes).to(self.device)
        self.optimizers = {
            "persona": self.make_optimizer(self.persona.parameters()),
            "priors": self.make_optimizer([self.class_means, self.class_logvar]),
            "learngene": self.make_optimizer(self.learngene.parameters()),
            "decoder": self.make_optimizer(self.decoder.parameters()),
            "adversary": self.make_optimizer(self.adversary.parameters()),
            "classifier": self.make_optimizer(self.classifier.parameters()),
        }
        self.generator = torch.Generator().manual_seed(task.seed)  # batch order
        self.noise = torch.Generator(device=self.device).manual_seed(task.seed)
        self.rounds_trained = 0
        self.frozen_until = 0  # priors are fixed while rounds_trained < frozen_until

    @property
    def priors_frozen(self) -> bool:
        """Whether the class Gaussians are fixed (a late joiner's first ``t_init`` rounds)."""
        return self.rounds_trained < self.frozen_until

    def class_variances(self) -> torch.Tensor:
        """Diagonal class variances (K, d_p)."""
        return self.class_logvar.exp()

    def _modules(self) -> tuple[nn.Module, ...]:
        return (self.persona, self.learngene, self.decoder, self.adversary, self.classifier)

    def _learngene_state(self) -> dict[str, torch.Tensor]:
        """φ's float parameters and BatchNorm statistics, aliasing the live tensors."""
        return {k: v for k, v in self.learngene.state_dict().items() if v.is_floating_point()}

    def shared_state(self) -> dict[str, torch.Tensor]:
        state = {LEARNGENE_PREFIX + k: v for k, v in self._learngene_state().items()}
        state["class_means"] = self.class_means.detach()
        state["class_vars"] = self.class_variances().detach()
        return state

    @torch.no_grad()
    def _set_variances(self, variances: torch.Tensor) -> None:
        self.class_logvar.copy_(variances.clamp(min=self.options.var_floor).log())

    @torch.no_grad()
    def _reset_learngene_optimizer(self) -> None:
        self.optimizers["learngene"] = self.make_optimizer(self.learngene.parameters())

    @torch.no_grad()
    def set_shared(self, tensors: dict[str, torch.Tensor]) -> None:
        missing = set(self.shared_state()) - set(tensors)
        if missing:
            raise KeyError(f"received state lacks {sorted(missing)}")
        for name, value in self._learngene_state().items():
            value.copy_(tensors[LEARNGENE_PREFIX + name])
        self.class_means.copy_(tensors["class_means"])
        self._set_variances(tensors["class_vars"].to(self.device))
        self._reset_learngene_optimizer()

    def init_from(self, received: Payload) -> None:
        """Algorithm 2 of paper 000: copy φ and the priors (no EMA), fix the priors a while."""
        self.set_shared(received.tensors)
        self.frozen_until = self.rounds_trained + self.options.t_init

    @torch.no_grad()
    def merge(self, received: list[Payload]) -> None:
        if not received:
            return
        incoming = [p.tensors for p in received]
        exponent = self.options.staleness_exponent
        weights = staleness_weights(self.current_round, [p.round for p in received], exponent)

        def mean_of(
            name: str, own: torch.Tensor | None = None, out: torch.Tensor | None = None
        ) -> torch.Tensor:
            values = [t[name].to(self.device) for t in incoming]
            return weighted_average(own, values, weights, out=out)

        own_weight = self.options.merge == "average"
        for name, value in self._learngene_state().items():
            mean_of(LEARNGENE_PREFIX + name, value if own_weight else None, out=value)
        self._reset_learngene_optimizer()
        if self.priors_frozen:
            return
        alpha = self.options.alpha
        self.class_means.copy_(ema(self.class_means, mean_of("class_means"), alpha))
        self._set_variances(ema(self.class_variances(), mean_of("class_vars"), alpha))

    def train_round(self, data: LabelledImages) -> dict[str, float]:
        for module in self._modules():
            module.train()
        totals = torch.zeros(len(LOSS_NAMES), device=self.device)
        steps = 0
        for _ in range(self.task.local_epochs):
            for x, y in data.batches(self.task.batch_size, generator=self.generator):
                totals += self._step(x, y)
                steps += 1
        self.rounds_trained += 1
        means = (totals / max(1, steps)).tolist()  # one device sync per round
        return dict(zip(LOSS_NAMES, means, strict=True))

    def _step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """One mini-batch of the notes' §5.2 update; returns the detached losses."""
        opts = self.options
        z_p = self.persona(x)
        loss_cls, loss_log = gmm_loss(z_p, y, self.class_means, self.class_variances())
        mu, logvar = self.learngene(x)
        eps = torch.randn(mu.shape, generator=self.noise, device=self.device)
        z_l = mu + (0.5 * logvar).exp() * eps
        loss_kl = kl_standard_normal(mu, logvar).mean()

        # ϑ learns the labels from a detached z_l, then φ is pushed towards ϑ's uniform output
        # through a frozen copy of ϑ (detached parameters), so ϑ's step sees only L_adv.
        loss_adv = F.cross_entropy(self.adversary(z_l.detach()), y)
        if opts.use_gl:
            self.optimizers["adversary"].zero_grad(set_to_none=True)
            loss_adv.backward()
            self.optimizers["adversary"].step()
        frozen = {k: v.detach() for k, v in self.adversary.named_parameters()}
        loss_adv_u = uniform_cross_entropy(functional_call(self.adversary, frozen, (z_l,)))

        if opts.routing == "elbo":
            latent = torch.cat([z_p, z_l], dim=1)
        elif opts.routing == "learngene":  # ψ by L_PR alone: the decoder leans on φ
            latent = torch.cat([z_p.detach(), z_l], dim=1)
        else:  # literal: θ alone learns from L_rec
            latent = torch.cat([z_p, z_l], dim=1).detach()
        x_rec = self.decoder(latent)
        loss_rec = (x_rec - x).square().flatten(1).sum(1).mean()
        noise = torch.randn(x.shape, generator=self.noise, device=self.device)
        x_noisy = x_rec.detach() + math.sqrt(opts.noise_var) * noise
        loss_ce = F.cross_entropy(self.classifier(x), y) + F.cross_entropy(
            self.classifier(x_noisy), y
        )

        objective = opts.lambda_rec * loss_rec + loss_ce
        if opts.use_pr:
            objective = objective + opts.lambda_pr * (loss_cls + loss_log)
        if opts.use_gl:
            objective = objective + opts.lambda_kl * loss_kl + opts.lambda_adv * loss_adv_u
        main = [name for name in self.optimizers if name != "adversary"]
        for name in main:
            self.optimizers[name].zero_grad(set_to_none=True)
        objective.backward()
        for name in main:
            if not (name == "priors" and self.priors_frozen):
                self.optimizers[name].step()
        if not self.priors_frozen:
            with torch.no_grad():
                self.class_logvar.clamp_(min=math.log(opts.var_floor))

        loss_pr = loss_cls + loss_log
        loss_gl = loss_kl + loss_adv + loss_adv_u
        losses = (loss_pr, loss_cls, loss_log, loss_gl, loss_kl, loss_adv, loss_adv_u)
        return torch.stack([*losses, loss_rec, loss_ce]).detach()

    @torch.no_grad()
    def predict(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """The three readings of the papers' prediction: f_ω(x) (the primary), the decoder
        path f_ω(θ(ψ(x), μ_φ(x))) (004's "final prediction"), and the GMM posterior on
        z_p = ψ(x) under the class Gaussians (the PersonaNet's own classifier)."""
        for module in self._modules():
            module.eval()
        mu, _ = self.learngene(x)
        z_p = self.persona(x)
        x_rec = self.decoder(torch.cat([z_p, mu], dim=1))
        return {
            "acc": self.classifier(x),
            "acc_decoder": self.classifier(x_rec),
            "acc_gmm": gmm_logits(z_p, self.class_means, self.class_variances()),
        }

    @torch.no_grad()
    def diagnostics(self, data: LabelledImages) -> dict[str, float]:
        """How much the decoder reads the shared z_l: the reconstruction error (summed over
        pixels, mean over images) with z_l = μ_φ(x), and with z_l blanked to the prior mean 0."""
        for module in self._modules():
            module.eval()
        sums = torch.zeros(2, device=self.device)
        for x, _ in data.batches(max(256, self.task.batch_size), shuffle=False):
            z_p, (mu, _) = self.persona(x), self.learngene(x)
            for i, z_l in enumerate((mu, torch.zeros_like(mu))):
                x_rec = self.decoder(torch.cat([z_p, z_l], dim=1))
                sums[i] += (x_rec - x).square().flatten(1).sum(1).sum()
        rec, blank = (sums / max(1, len(data))).tolist()
        return {"rec_loss": rec, "rec_loss_blank_zl": blank, "rec_loss_zl_gain": blank - rec}
