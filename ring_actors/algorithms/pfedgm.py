"""pFedGM: a shared generator and Gaussian head, then a personal Gaussian head per client.

Phase 1 is FedAvg without a server. Each round every client draws, from a seed all can
reproduce, whether it takes part (Bernoulli(q)). Those that do train the generator phi and
the navigator psi = (means, biases) on the navigator's cross-entropy plus a pull toward their
own class prototypes, with the diagonal precisions nu stepped on the side. One ring lap then
sums n_i * (phi, psi, nu)_i and n_i, so every client ends the round with the exact
sample-weighted average: the global model.

Phase 2 is local: with the generator frozen, each client fits a ``PersonalHead`` on its own
training features. Phase 2 changes only predictions, so it runs at the first evaluation
after the global model changes (the runtime evaluates every ``eval.every`` rounds and at the
last round) on the training set kept from ``train_round``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated, Literal

import numpy as np
import torch
from torch import nn

from ring_actors.algorithms import optim
from ring_actors.algorithms.base import Algorithm, AlgorithmOptions, TaskSpec
from ring_actors.algorithms.pfedgm_heads import (
    adjust_prototypes,
    class_means,
    gaussian_logits,
    navigator_logits,
    phase1_losses,
)
from ring_actors.algorithms.pfedgm_personal import PersonalHead, fit_sgd, refit_biases
from ring_actors.data.images import LabelledImages
from ring_actors.delivery.payloads import Payload
from ring_actors.models import build_backbone
from ring_actors.models.pfedgm_nets import FedPACCNN
from ring_actors.plugins.paths import BACKBONE_PLUGIN

LAP = "phase1"
WEIGHT = "weight"  # the lap key holding the sum of the contributors' training-set sizes
LOSS_NAMES = ("loss_shared", "loss_local", "loss_statistic")


@dataclass(frozen=True)
class PFedGMOptions(AlgorithmOptions):
    """pFedGM hyperparameters; defaults are the paper's, or the notes' where it is silent."""

    lr: float = 0.01
    backbone: Annotated[Literal["fedpac_cnn", "cnn", "resnet18"], BACKBONE_PLUGIN] = "fedpac_cnn"
    optimizer: Literal["adam", "sgd"] = "sgd"
    momentum: float = 0.5
    weight_decay: float = 5e-4
    participation: float = 0.3  # q: each client's chance of training in a round
    lam: float = 1.0  # weight of the local objective, and of the local term in Phase 2
    nu_lr: float = 0.01
    nu_momentum: float = 0.5
    proto_alpha: float = 0.5  # in-round prototype adjustment; 0 keeps round-start means
    precision_floor: float = 1e-4
    phase2_sgd: bool = True  # FA: SGD on the whole personal head
    phase2_epochs: int = 5
    phase2_lr: float = 0.05
    phase2_momentum: float = 0.5
    phase2_weight_decay: float = 5e-4
    phase2_lbfgs: bool = True  # GA: then L-BFGS on the bias offsets
    lbfgs_lr: float = 0.05
    lbfgs_iters: int = 10
    lbfgs_steps: int = 5

    def __post_init__(self) -> None:
        super().__post_init__()
        q = self.participation
        if not 0 < q <= 1:
            raise ValueError(f"participation: must be in (0, 1], got {q}")
        for name in ("nu_lr", "phase2_lr", "lbfgs_lr", "precision_floor"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: must be > 0, got {getattr(self, name)}")
        for name in ("lam", "phase2_weight_decay"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: must be >= 0, got {getattr(self, name)}")
        for name in ("nu_momentum", "phase2_momentum"):
            if not 0 <= getattr(self, name) < 1:
                raise ValueError(f"{name}: must be in [0, 1), got {getattr(self, name)}")
        if not 0 <= self.proto_alpha <= 1:
            raise ValueError(f"proto_alpha: must be in [0, 1], got {self.proto_alpha}")
        for name in ("phase2_epochs", "lbfgs_iters", "lbfgs_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be an integer >= 1, got {getattr(self, name)}")


@contextmanager
def _seeded(seed: int) -> Iterator[None]:
    """Deterministic CPU initialisation without disturbing the global RNG."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def _generator_body(options: PFedGMOptions, task: TaskSpec) -> tuple[nn.Module, int]:
    """The feature extractor and its feature size: the FedPAC/pFedFDA CNN or a backbone's body."""
    channels, height, _ = task.input_shape
    if options.backbone == "fedpac_cnn":
        net: nn.Module = FedPACCNN(channels, height)
    else:
        net = build_backbone(options.backbone, task.input_shape, task.num_classes)
    return net.body, net.feature_dim


class PFedGM(Algorithm):
    """One pFedGM client. Nothing is pushed to neighbours: the global model moves by ring lap."""

    Options = PFedGMOptions

    def __init__(self, options: PFedGMOptions, task: TaskSpec) -> None:
        super().__init__(options, task)
        classes = task.num_classes
        with _seeded(task.shared_seed):  # the same phi0, psi0 on every client
            body, dim = _generator_body(options, task)
            means = torch.randn(classes, dim) / math.sqrt(dim)
        self.body = body.to(self.device)
        self.means = nn.Parameter(means.to(self.device))
        self.biases = nn.Parameter(torch.zeros(classes, device=self.device))
        self.precisions = nn.Parameter(torch.ones(classes, dim, device=self.device))
        self.global_model = {k: v.clone() for k, v in self.model_state().items()}
        self.personal: PersonalHead | None = None  # fitted on the current generator, or None
        self.train_data: LabelledImages | None = None
        self.next_round = 0
        self.trained_round: int | None = None
        self.rng = torch.Generator().manual_seed(task.seed)

    # ---- state -------------------------------------------------------------------------

    def model_state(self) -> dict[str, torch.Tensor]:
        """phi, psi and nu by lap key, aliasing the live tensors."""
        state = {
            f"generator.{k}": v for k, v in self.body.state_dict().items() if v.is_floating_point()
        }
        state["navigator.means"] = self.means.detach()
        state["navigator.biases"] = self.biases.detach()
        state["extractor.precisions"] = self.precisions.detach()
        return state

    @torch.no_grad()
    def _install_global(self) -> None:
        for name, value in self.model_state().items():
            value.copy_(self.global_model[name])
        self.personal = None

    def shared_state(self) -> dict[str, torch.Tensor]:
        return {}

    def merge(self, received: list[Payload]) -> None:
        """Nothing is pushed, so nothing arrives."""

    def hand_off_state(self) -> dict[str, torch.Tensor]:
        """The global model from the last lap."""
        return {k: v.clone() for k, v in self.global_model.items()}

    def joining(self, first_round: int) -> None:
        """Draw participation for the ring's rounds, handed a model or not."""
        self.next_round = first_round

    @torch.no_grad()
    def init_from(self, received: Payload) -> None:
        """Install the handed-off global model; Phase 2 follows at the next evaluation."""
        missing = set(self.global_model) - set(received.tensors)
        if missing:
            raise KeyError(f"received state lacks {sorted(missing)}")
        for name, value in self.global_model.items():
            value.copy_(received.tensors[name])
        self._install_global()
        self.next_round = received.round + 1

    # ---- Phase 1 -----------------------------------------------------------------------

    def sampled(self, round_: int) -> bool:
        """Whether this client trains in ``round_``: Bernoulli(q), reproducible from the seeds."""
        rng = np.random.default_rng([self.task.shared_seed, round_, self.task.seed])
        return bool(rng.random() < self.options.participation)

    def train_round(self, data: LabelledImages) -> dict[str, float]:
        self.train_data = data
        round_, self.next_round = self.next_round, self.next_round + 1
        if not self.sampled(round_):
            return {"sampled": 0.0}
        self.trained_round = round_
        self.personal = None
        losses = self._train_phase1(data)
        return {"sampled": 1.0, **losses}

    def _features(self, data: LabelledImages) -> tuple[torch.Tensor, torch.Tensor]:
        """Generator features of every sample of ``data`` in eval mode, with labels."""
        self.body.eval()
        zs, ys = [], []
        with torch.no_grad():
            for x, y in data.batches(max(256, self.task.batch_size), shuffle=False):
                zs.append(self.body(x))
                ys.append(y)
        return torch.cat(zs), torch.cat(ys)

    def _train_phase1(self, data: LabelledImages) -> dict[str, float]:
        opts = self.options
        z_all, y_all = self._features(data)
        prototypes, _ = class_means(z_all, y_all, torch.zeros_like(self.means.detach()))
        optimizer = self.make_optimizer([*self.body.parameters(), self.means, self.biases])
        nu_optimizer = optim.SGD([self.precisions], lr=opts.nu_lr, momentum=opts.nu_momentum)
        self.body.train()
        totals = torch.zeros(len(LOSS_NAMES), device=self.device)
        steps = 0
        for _ in range(self.task.local_epochs):
            for x, y in data.batches(self.task.batch_size, generator=self.rng):
                z = self.body(x)
                shared, local, statistic = phase1_losses(
                    z, y, self.means, self.biases, self.precisions, prototypes
                )
                optimizer.zero_grad(set_to_none=True)
                nu_optimizer.zero_grad(set_to_none=True)
                # The statistic loss sees only detached inputs, so one backward pass gives
                # each optimizer exactly its own gradients.
                (shared + opts.lam * local + statistic).backward()
                optimizer.step()
                nu_optimizer.step()
                with torch.no_grad():
                    self.precisions.clamp_(min=opts.precision_floor)
                adjust_prototypes(prototypes, z.detach(), y, opts.proto_alpha)
                totals += torch.stack([shared, local, statistic]).detach()
                steps += 1
        means = (totals / max(1, steps)).tolist()  # one device sync per round
        return dict(zip(LOSS_NAMES, means, strict=True))

    def laps(self, round_: int) -> tuple[str, ...]:
        return (LAP,)

    def contribute(self, lap: str, round_: int) -> dict[str, torch.Tensor]:
        """n * (phi, psi, nu) and n if this client trained in ``round_``, else nothing."""
        if self.trained_round != round_ or self.train_data is None:
            return {}
        n = float(len(self.train_data))
        out = {name: n * value for name, value in self.model_state().items()}
        out[WEIGHT] = torch.tensor(n)
        return out

    @torch.no_grad()
    def apply_lap(
        self, lap: str, round_: int, total: dict[str, torch.Tensor], contributors: list[int]
    ) -> None:
        """Set the global model to the weighted average; with no weight keep the last one.

        The zero-weight case is a ``where`` rather than a branch, so the total can stay on
        the device without a sync.
        """
        weight = total.get(WEIGHT)
        if weight is not None:
            weight = weight.to(self.device)
            for name, value in self.global_model.items():
                if name in total:
                    average = total[name].to(self.device) / weight
                    value.copy_(torch.where(weight > 0, average, value))
        self._install_global()
        self.next_round = round_ + 1

    # ---- Phase 2 and prediction --------------------------------------------------------

    def personalize(self, data: LabelledImages) -> None:
        """Fit the personal head on ``data``'s features under the frozen generator."""
        opts = self.options
        z, y = self._features(data)
        local_means, _ = class_means(z, y, self.means.detach())  # absent class: navigator mean
        head = PersonalHead(self.means, self.biases, self.precisions, local_means, opts.lam)
        if opts.phase2_sgd:
            optimizer = optim.SGD(
                head.parameters(),
                lr=opts.phase2_lr,
                momentum=opts.phase2_momentum,
                weight_decay=opts.phase2_weight_decay,
            )
            fit_sgd(
                head,
                z,
                y,
                optimizer,
                opts.phase2_epochs,
                self.task.batch_size,
                opts.precision_floor,
                self.rng,
            )
        if opts.phase2_lbfgs:
            refit_biases(head, z, y, opts.lbfgs_lr, opts.lbfgs_iters, opts.lbfgs_steps)
        self.personal = head

    def evaluate(self, data: LabelledImages) -> dict[str, float]:
        if self.personal is None and self.train_data is not None:
            self.personalize(self.train_data)
        return super().evaluate(data)

    @torch.no_grad()
    def predict(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """acc: the personal head (the global Gaussian head until Phase 2 has run);
        acc_global: the global Gaussian head (the paper's NA); acc_navigator: psi alone."""
        self.body.eval()
        z = self.body(x)
        global_head = gaussian_logits(z, self.means, self.precisions, self.biases)
        personal = global_head if self.personal is None else self.personal(z)
        return {
            "acc": personal,
            "acc_global": global_head,
            "acc_navigator": navigator_logits(z, self.means, self.biases),
        }
