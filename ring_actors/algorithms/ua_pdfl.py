"""UA-PDFL: unit-representation-guided personalisation for decentralised FL.

Every client probes its model with one fixed all-ones input. The softmax output (the *unit
representation*) fingerprints the label prior the model was trained on, and a symmetric KL
between fingerprints tells a client which sampled peers hold similar data. The exchange runs
in two phases: peers first offer only their fingerprint and unit feature; the client then pulls
model parts as the decision rule says:

* every sampled peer similar: **client-wise dropout**, the whole model of one randomly chosen
  peer replaces the local one (one model transferred);
* otherwise **layer-wise personalisation**: the feature extractor is averaged over self and all
  sampled peers, the classifier over self and only the similar ones (weights: data sizes).

Local training adds ``mu * mean((g(unit) - mean unit feature)^2)``, pulling the extractor's
view of the unit input toward the mean over self and every offering peer.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn
from torch.nn import functional as F

from ring_actors.algorithms.base import AlgorithmOptions, TaskSpec
from ring_actors.algorithms.supervised import SupervisedAlgorithm
from ring_actors.data.images import LabelledImages
from ring_actors.delivery.payloads import Payload
from ring_actors.models.split import FeatureClassifierNet

FEATURE = "feature."
CLASSIFIER = "classifier."
UNIT = "unit"  # offer key: softmax of the model on the unit input, shape (K,)
UNIT_FEATURE = "unit_feature"  # offer key: the feature extractor's output on it, shape (D,)
EPS = 1e-12  # probabilities are clamped here before logs


@dataclass(frozen=True)
class UAPDFLOptions(AlgorithmOptions):
    """Defaults: the paper's optimiser settings; threshold and mu as the notes recommend."""

    lr: float = 0.05
    optimizer: Literal["adam", "sgd"] = "sgd"
    momentum: float = 0.5
    lr_decay: float = 0.95  # per round: lr * lr_decay ** round, fresh optimiser every round
    threshold: float = 0.1  # th_I: a peer is similar when its divergence is below this
    mu: float = 0.01  # weight of the unit-feature regulariser
    divergence: Literal["sym_kl", "js"] = "sym_kl"  # the paper's formula, or true JS

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 < self.lr_decay <= 1:
            raise ValueError(f"lr_decay: must be in (0, 1], got {self.lr_decay}")
        if not self.threshold >= 0:
            raise ValueError(f"threshold: must be >= 0, got {self.threshold}")
        if not self.mu >= 0:
            raise ValueError(f"mu: must be >= 0, got {self.mu}")
        if self.divergence not in ("sym_kl", "js"):
            raise ValueError(f"divergence: must be 'sym_kl' or 'js', got {self.divergence!r}")


def _kl(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """KL(p || q) over the last axis, natural log, with both sides clamped away from 0."""
    p, q = p.clamp_min(EPS), q.clamp_min(EPS)
    return (p * (p.log() - q.log())).sum(-1)


def symmetric_kl(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """The paper's Eq. 6: ½ KL(p||q) + ½ KL(q||p) (it calls this Jensen-Shannon)."""
    return 0.5 * _kl(p, q) + 0.5 * _kl(q, p)


def jensen_shannon(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """True JS divergence: ½ KL(p||m) + ½ KL(q||m) with m the mixture; at most ln 2."""
    m = 0.5 * (p + q)
    return 0.5 * _kl(p, m) + 0.5 * _kl(q, m)


DIVERGENCES = {"sym_kl": symmetric_kl, "js": jensen_shannon}


def unit_penalty(feature: torch.Tensor, anchor: torch.Tensor) -> torch.Tensor:
    """Mean squared distance of the unit feature to the peers' mean, as the official code.

    A sum over the extractor's thousands of outputs (3,136 for the CNN on 28x28) makes
    ``mu`` thousands of times stronger and drove SGD at lr 0.05 to overflow.
    """
    return (feature - anchor).square().mean()


@dataclass(frozen=True)
class Decision:
    """One round's outcome of the decision rule, kept until the round's training ends."""

    dropout: bool
    similar: tuple[int, ...]  # senders below the threshold
    divergences: dict[int, float]


@contextmanager
def _eval_mode(module: nn.Module) -> Iterator[None]:
    """BatchNorm on running statistics while probing one constant input; restored after."""
    was_training = module.training
    module.eval()
    try:
        yield
    finally:
        module.train(was_training)


class UAPDFL(SupervisedAlgorithm):
    """One UA-PDFL client: a backbone split into a shared extractor and a selective classifier."""

    Options = UAPDFLOptions

    def __init__(self, options: UAPDFLOptions, task: TaskSpec) -> None:
        super().__init__(options, task)
        self.model: FeatureClassifierNet = FeatureClassifierNet(self.model)
        self.unit_input = torch.ones(1, *task.input_shape, device=self.device)
        self.picker = random.Random(task.seed)  # which peer a dropout copies: private
        self.num_samples = 0  # own training-set size, the merge weight; set by train_round
        self.rounds_trained = 0
        self.decision: Decision | None = None
        self.anchor: torch.Tensor | None = None  # mean unit feature of self and the offerers

    # ---- what peers see --------------------------------------------------------------------

    def shared_state(self) -> dict[str, torch.Tensor]:
        """Floating parameters and BatchNorm statistics; the batch counters stay local."""
        return {k: v for k, v in self.model.state_dict().items() if v.is_floating_point()}

    def keys(self, prefix: str) -> tuple[str, ...]:
        """Shared-state keys of one part: ``FEATURE`` or ``CLASSIFIER``."""
        return tuple(k for k in self.shared_state() if k.startswith(prefix))

    @torch.no_grad()
    def probe(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(unit representation (K,), unit feature (D,)) of the current model."""
        with _eval_mode(self.model):
            feature = self.model.feature(self.unit_input)
            probs = F.softmax(self.model.classifier(feature), dim=1)
        return probs[0], feature[0]

    def offer(self) -> dict[str, torch.Tensor]:
        """Phase one: only the fingerprint and the unit feature travel."""
        probs, feature = self.probe()
        return {UNIT: probs, UNIT_FEATURE: feature}

    # ---- phase two: what to pull, and merging it ---------------------------------------------

    def decide(self, offers: list[Payload]) -> dict[int, tuple[str, ...]]:
        """Apply the decision rule to the offering peers; remember it for merge and training."""
        if not offers:
            return {}
        own_probs, own_feature = self.probe()
        peers = [p.sender for p in offers]
        units = torch.stack([p.tensors[UNIT].to(self.device) for p in offers])
        features = torch.stack([p.tensors[UNIT_FEATURE].to(self.device) for p in offers])
        self.anchor = torch.cat([own_feature[None], features]).mean(0)
        divergences = dict(
            zip(peers, DIVERGENCES[self.options.divergence](own_probs, units).tolist(), strict=True)
        )
        threshold = self.options.threshold
        similar = tuple(s for s in peers if divergences[s] < threshold)
        dropout = all(d <= threshold for d in divergences.values())
        self.decision = Decision(dropout, similar, divergences)
        if dropout:
            chosen = self.picker.choice(peers)
            everything = tuple(self.shared_state())
            return {s: everything if s == chosen else () for s in peers}
        feature, classifier = self.keys(FEATURE), self.keys(CLASSIFIER)
        return {s: feature + classifier if s in similar else feature for s in peers}

    @torch.no_grad()
    def merge(self, received: list[Payload]) -> None:
        """Each key: the data-size-weighted mean of own value and every payload carrying it.

        Under dropout the own model takes no part (the copied peer replaces it). A pulled peer
        that died simply is missing: the means run over what arrived, and nothing arriving
        keeps the local model.
        """
        if not received:
            return
        dropout = self.decision is not None and self.decision.dropout
        own_weight = 0.0 if dropout else float(self.num_samples)
        for name, value in self.shared_state().items():
            carriers = [p for p in received if name in p.tensors]
            if not carriers:
                continue
            total, weight = value * own_weight, own_weight
            for payload in carriers:
                n = float(max(payload.num_samples, 1))  # a payload without a count weighs one
                total = total + n * payload.tensors[name].to(self.device)
                weight += n
            value.copy_(total / weight)

    def joining(self, first_round: int) -> None:
        """A late joiner continues the ring's learning-rate decay, handed a model or not."""
        self.rounds_trained = first_round

    def init_from(self, received: Payload) -> None:
        """A late joiner copies the whole model and continues the ring's learning-rate decay."""
        super().init_from(received)
        self.rounds_trained = received.round + 1

    # ---- local training --------------------------------------------------------------------

    def unit_feature(self) -> torch.Tensor:
        """The extractor's output on the unit input, with gradients (BatchNorm in eval mode)."""
        with _eval_mode(self.model.feature):
            return self.model.feature(self.unit_input)[0]

    def round_lr(self) -> float:
        return self.options.lr * self.options.lr_decay**self.rounds_trained

    def train_round(self, data: LabelledImages) -> dict[str, float]:
        self.num_samples = len(data)
        self.optimizer = self.make_optimizer(self.model.parameters())
        for group in self.optimizer.param_groups:
            group["lr"] = self.round_lr()
        regularise = self.anchor is not None and self.options.mu > 0
        self.model.train()
        totals = torch.zeros(2, device=self.device)
        steps = 0
        for _ in range(self.task.local_epochs):
            for x, y in data.batches(self.task.batch_size, generator=self.generator):
                loss_ce = F.cross_entropy(self.model(x), y)
                loss_aux = torch.zeros((), device=self.device)
                if regularise:
                    loss_aux = unit_penalty(self.unit_feature(), self.anchor)
                loss = loss_ce + self.options.mu * loss_aux
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                self.optimizer.step()
                totals += torch.stack([loss_ce.detach(), loss_aux.detach()])
                steps += 1
        loss_ce, loss_aux = (totals / max(1, steps)).tolist()  # one device sync per round
        metrics = {"loss": loss_ce, "loss_aux": loss_aux, "lr": self.round_lr()}
        if self.decision is not None:
            peers = max(1, len(self.decision.divergences))
            metrics["dropout"] = float(self.decision.dropout)
            metrics["similar_fraction"] = len(self.decision.similar) / peers
            metrics["divergence_mean"] = sum(self.decision.divergences.values()) / peers
            # per peer, so a comparison can read every decision from the reports
            divergences = self.decision.divergences.items()
            metrics.update({f"divergence_from_{s}": d for s, d in divergences})
        self.rounds_trained += 1
        self.decision, self.anchor = None, None
        return metrics
