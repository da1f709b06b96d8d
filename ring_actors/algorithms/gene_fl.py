"""GENE-FL on a ring: Fisher-masked proximal training, learnGene layers averaged by ring lap.

Each client keeps a personal model and a copy of its cluster's model (the proximal anchor).
After local training it selects its top-gamma layers by sensitivity (its learnGene) and adds
them into a ring lap; the lap's per-cluster, per-layer sums and counts give every client the
exact mean over the contributors of each layer. Clusters come from a one-shot all-gather of
SVD data signatures followed by the same seeded K-Means on every client. A late joiner picks
the nearest cluster by its own signature and inherits that cluster's learnGene.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass
from typing import Literal

import torch
from torch.nn import functional as F

from ring_actors.algorithms.base import Algorithm, AlgorithmOptions, TaskSpec
from ring_actors.algorithms.gene_fl_ops import (
    cluster_means,
    data_signature,
    diagonal_fisher,
    fisher_mask,
    gamma_floor,
    kmeans,
    lap_scalars,
    layer_groups,
    layer_scores,
    nearest,
    next_gamma,
    seeded,
    takes_part,
    top_layers,
)
from ring_actors.data.images import LabelledImages
from ring_actors.delivery.payloads import Payload
from ring_actors.models import build_backbone

SIGNATURES, LEARNGENE = "signatures", "learngene"
SIGNATURE_MAX_SAMPLES = 2000  # cost cap for the one-shot SVD: a seeded subsample beyond it
_GENE_KEY = re.compile(r"^gene/c(\d+)/(.+)$")


@dataclass(frozen=True)
class GeneFLOptions(AlgorithmOptions):
    """GENE-FL hyperparameters; defaults are the paper's (and the notes' where it is silent)."""

    lr: float = 0.01
    optimizer: Literal["adam", "sgd"] = "sgd"
    lambda1: float = 0.5  # weight of the squared pull towards the cluster model (L_gen)
    lambda2: float = 0.05  # weight of the same pull on high-Fisher parameters only (L_elg)
    epsilon: float = 0.5  # threshold on the min-max normalised Fisher
    clusters: int = 4  # K of the one-shot K-Means
    participation: float = 0.2  # per-round Bernoulli rate (10 of 50 clients)
    svd_rank: int = 5  # d: singular vectors in a data signature
    gene_fraction: float = 0.2  # gamma floor: smallest layers holding this parameter share
    gamma_delta: float = 0.01  # shrink gamma unless mean train accuracy fell more than this
    weighting: Literal["count", "samples"] = "count"  # per-layer mean: uniform or by samples
    known_rounds: int | None = None  # clients present from the start train until this round
    fisher_batch_size: int = 64  # 1 gives the exact per-sample empirical Fisher
    fisher_samples: int = 2000  # samples the Fisher is estimated on, at most

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("lambda1", "lambda2"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: must be >= 0, got {getattr(self, name)}")
        for name in ("epsilon", "participation"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name}: must be in [0, 1], got {getattr(self, name)}")
        if not 0 < self.gene_fraction <= 1:
            raise ValueError(f"gene_fraction: must be in (0, 1], got {self.gene_fraction}")
        if self.gamma_delta < 0:
            raise ValueError(f"gamma_delta: must be >= 0, got {self.gamma_delta}")
        for name in ("clusters", "svd_rank", "fisher_batch_size", "fisher_samples"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be an integer >= 1, got {getattr(self, name)}")
        if self.known_rounds is not None and self.known_rounds < 0:
            raise ValueError(f"known_rounds: must be null or >= 0, got {self.known_rounds}")


class GeneFL(Algorithm):
    """One GENE-FL client. Nothing is pushed point to point: every exchange is a ring lap."""

    Options = GeneFLOptions

    def __init__(self, options: GeneFLOptions, task: TaskSpec) -> None:
        super().__init__(options, task)
        with seeded(task.shared_seed):  # one common start for every client and cluster model
            self.model = build_backbone(options.backbone, task.input_shape, task.num_classes)
        self.model.to(self.device)
        self.params = dict(self.model.named_parameters())
        self.groups = layer_groups(self.model)
        state = self.model.state_dict()  # values each layer sends, statistics included
        self.sizes = {n: sum(state[k].numel() for k in keys) for n, keys in self.groups.items()}
        self.anchor = {n: p.detach().clone() for n, p in self.params.items()}  # Theta_k
        self.downloaded: dict[str, torch.Tensor] = {}  # cluster layers not yet in the model
        self.gamma = len(self.params)  # full sharing first, shrinking to the floor
        self.gamma_min = gamma_floor(
            [p.numel() for p in self.params.values()], options.gene_fraction
        )
        self.best = 0.0
        self.cluster = 0
        self.centroids: torch.Tensor | None = None  # (K, D*d) on the CPU, with member counts
        self.counts: torch.Tensor | None = None
        self.genes: dict[int, dict[str, torch.Tensor]] = {}  # every cluster's learnGene (CPU)
        self.signature: torch.Tensor | None = None
        self.new_signature: torch.Tensor | None = None  # a joiner's, for the centroid update
        self.round = 0  # the round the next train_round belongs to
        self.joined = False  # an agnostic newcomer (``joining``), past the known phase too
        self.pending = False  # a newcomer that has not yet picked its cluster
        self.participating = False
        self.retired = False  # a known client past its phase: keeps its personal model
        self.selected: tuple[str, ...] = ()  # this round's learnGene layers
        self.train_acc = 0.0
        self.num_samples = 0
        self.generator = torch.Generator().manual_seed(task.seed)

    # ---- what travels -----------------------------------------------------------------------

    def shared_state(self) -> dict[str, torch.Tensor]:
        return {}

    def merge(self, received: list[Payload]) -> None:
        """Nothing is pushed; the learnGene laps carry every exchange."""

    def laps(self, round_: int) -> tuple[str, ...]:
        if round_ == 0 and self.options.clusters > 1:
            return (SIGNATURES, LEARNGENE)
        return (LEARNGENE,)

    def contribute(self, lap: str, round_: int) -> dict[str, torch.Tensor]:
        if lap == SIGNATURES:
            if self.signature is None:
                return {}
            return {f"sig/{self.task.seed}": self.signature}
        out: dict[str, torch.Tensor] = {}
        k = self.cluster
        if self.new_signature is not None:
            out[f"c{k}/#sig"] = self.new_signature
            out[f"c{k}/#sig_n"] = torch.tensor(1.0)
            self.new_signature = None
        if not self.participating:
            return out
        weight = 1.0 if self.options.weighting == "count" else float(self.num_samples)
        state = self.model.state_dict()
        out[f"c{k}/#w"] = torch.tensor(weight)
        for name in self.selected:
            for key in self.groups[name]:
                value = state[key].detach()
                out[f"c{k}/{key}"] = value if weight == 1.0 else weight * value
            out[f"c{k}/{name}#n"] = torch.tensor(weight)
        out["#acc"] = torch.tensor(self.train_acc)
        out["#acc_n"] = torch.tensor(1.0)
        return out

    def apply_lap(
        self, lap: str, round_: int, total: dict[str, torch.Tensor], contributors: list[int]
    ) -> None:
        if lap == SIGNATURES:
            self._cluster(total)
            return
        weights = lap_scalars(total)  # the total may sit on our device: one sync
        num_clusters = 1 if self.centroids is None else len(self.centroids)
        for k in range(num_clusters):
            self._aggregate(k, total, weights)
            self._move_centroid(k, total, weights)
        if weights.get("#acc_n", 0.0) > 0:
            acc = weights["#acc"] / weights["#acc_n"]
            opts = self.options
            self.gamma, self.best = next_gamma(
                self.gamma, self.best, acc, self.gamma_min, opts.gamma_delta
            )
        self.round = round_ + 1

    def _cluster(self, total: dict[str, torch.Tensor]) -> None:
        """The same seeded K-Means on the same gathered signatures, on every client."""
        keys = sorted(key for key in total if key.startswith("sig/"))
        if not keys:
            return
        points = torch.stack([total[key].cpu() for key in keys]).double().numpy()
        k = min(self.options.clusters, len(keys))
        labels, centroids = kmeans(points, k, self.task.shared_seed)
        self.centroids = torch.from_numpy(centroids).float()
        self.counts = torch.bincount(torch.from_numpy(labels), minlength=k).float()
        own = f"sig/{self.task.seed}"
        if own in keys:
            self.cluster = int(labels[keys.index(own)])
        elif self.signature is not None:  # missed the gather: the nearest cluster
            self.cluster = nearest(self.signature, self.centroids)

    def _aggregate(self, k: int, total: dict[str, torch.Tensor], weights: dict[str, float]) -> None:
        """Install our cluster's layer means; remember every cluster's latest learnGene.

        A layer nobody in the cluster contributed keeps its value; a cluster with no
        contributors this round keeps its previous learnGene. The means become the proximal
        anchor at once but reach the personal model only when this client next trains (the
        download a selected client gets), so the model evaluated after a round is the one its
        own training produced, as the paper evaluates. A retired known client no longer
        receives its cluster's model, as a client the server no longer selects.
        """
        means, gene = cluster_means(total, weights, k, self.groups)
        if k == self.cluster and not self.retired:
            self._download(means)
        if gene:  # kept on the CPU: only a joiner's hand-off reads it
            self.genes[k] = {key: value.cpu() for key, value in gene.items()}

    def _move_centroid(
        self, k: int, total: dict[str, torch.Tensor], weights: dict[str, float]
    ) -> None:
        """Fold joiners' signatures into centroid k, identically on every client."""
        added = weights.get(f"c{k}/#sig_n", 0.0)
        if added <= 0 or self.centroids is None or self.counts is None:
            return
        n = float(self.counts[k])
        joined = total[f"c{k}/#sig"].to(self.centroids.device)
        self.centroids[k] = (n * self.centroids[k] + joined) / (n + added)
        self.counts[k] = n + added

    @torch.no_grad()
    def _download(self, values: dict[str, torch.Tensor]) -> None:
        """Cluster-model values: into the anchor now, into the personal model at next training."""
        for key, value in values.items():
            if key in self.anchor:
                self.anchor[key].copy_(value)
            self.downloaded[key] = value.detach().clone()

    @torch.no_grad()
    def _install(self, values: dict[str, torch.Tensor]) -> None:
        """Copy layer values into the personal model and the cluster-model anchor."""
        state = self.model.state_dict()
        for key, value in values.items():
            state[key].copy_(value)
            if key in self.anchor:
                self.anchor[key].copy_(value)

    # ---- joining ------------------------------------------------------------------------------

    def hand_off_state(self) -> dict[str, torch.Tensor]:
        """Every cluster's learnGene, the centroids with their counts, and the gamma schedule."""
        out = {
            "#round": torch.tensor(self.round),
            "#gamma": torch.tensor(self.gamma),
            "#best": torch.tensor(self.best),
        }
        if self.centroids is not None and self.counts is not None:
            out["#centroids"] = self.centroids.clone()
            out["#counts"] = self.counts.clone()
        for k, gene in self.genes.items():
            out.update({f"gene/c{k}/{key}": value for key, value in gene.items()})
        return out

    def joining(self, first_round: int) -> None:
        """An agnostic newcomer, handed the learnGene or not: it trains past the known phase."""
        self.joined = True
        self.round = first_round

    def init_from(self, received: Payload) -> None:
        """Adopt the ring's tables; the cluster is picked in the first round (it needs data)."""
        tensors = {key: value.cpu() for key, value in received.tensors.items()}
        self.round = int(tensors["#round"])
        self.gamma = int(tensors["#gamma"])
        self.best = float(tensors["#best"])
        self.centroids = tensors.get("#centroids")
        self.counts = tensors.get("#counts")
        self.genes = {}
        for key, value in tensors.items():
            match = _GENE_KEY.match(key)
            if match:
                self.genes.setdefault(int(match[1]), {})[match[2]] = value
        self.joined = self.pending = True

    def _settle_join(self) -> dict[str, float]:
        """Pick the nearest cluster by our signature and install its learnGene (Initia)."""
        self.pending = False
        if self.centroids is not None and self.signature is not None:
            self.cluster = nearest(self.signature, self.centroids)
            self.new_signature = self.signature
        gene = self.genes.get(self.cluster, {})
        self._install(gene)
        return {"initia_bytes": float(sum(v.numel() * v.element_size() for v in gene.values()))}

    # ---- training -----------------------------------------------------------------------------

    def train_round(self, data: LabelledImages) -> dict[str, float]:
        opts = self.options
        self.num_samples = len(data)
        metrics: dict[str, float] = {}
        if opts.clusters > 1 and self.signature is None:
            self.signature = data_signature(
                data, opts.svd_rank, SIGNATURE_MAX_SAMPLES, self.generator
            )
        if self.pending:
            metrics.update(self._settle_join())
        known_done = not self.joined and opts.known_rounds is not None
        known_done = known_done and self.round >= opts.known_rounds
        self.retired = known_done
        self.participating = not known_done and takes_part(
            self.task.shared_seed, self.round, self.task.seed, opts.participation
        )
        self.round += 1  # apply_lap re-syncs it with the ring's round
        self.selected = ()
        metrics.update(
            participated=float(self.participating),
            gamma=float(self.gamma),
            cluster=float(self.cluster),
        )
        if self.participating:
            self._install(self.downloaded)
            self.downloaded = {}
            metrics.update(self._train(data))
        return metrics

    def _train(self, data: LabelledImages) -> dict[str, float]:
        """Fisher mask on the round-start model, proximal SGD, then the top-gamma layers."""
        opts = self.options
        before = [p.detach().clone() for p in self.params.values()]
        fisher_batches = itertools.islice(
            data.batches(opts.fisher_batch_size, generator=self.generator),
            math.ceil(opts.fisher_samples / opts.fisher_batch_size),
        )
        masks = fisher_mask(diagonal_fisher(self.model, self.params, fisher_batches), opts.epsilon)
        high = torch.stack([m.sum() for m in masks.values()]).sum()
        optimizer = self.make_optimizer(self.params.values())  # fresh momentum every round
        self.model.train()
        losses = torch.zeros(4, device=self.device)
        correct = torch.zeros((), device=self.device)
        steps = seen = 0
        for epoch in range(self.task.local_epochs):
            last = epoch == self.task.local_epochs - 1
            for x, y in data.batches(self.task.batch_size, generator=self.generator):
                logits = self.model(x)
                loss_cls = F.cross_entropy(logits, y)
                loss_gen = torch.zeros((), device=self.device)
                loss_elg = torch.zeros((), device=self.device)
                for name, p in self.params.items():
                    d2 = (p - self.anchor[name]).square()
                    loss_gen = loss_gen + d2.sum()
                    loss_elg = loss_elg + (d2 * masks[name]).sum()
                loss = loss_cls + opts.lambda1 * loss_gen + opts.lambda2 * loss_elg
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                losses += torch.stack([loss, loss_cls, loss_gen, loss_elg]).detach()
                steps += 1
                if last:
                    correct += (logits.argmax(1) == y).sum()
                    seen += len(y)
        scores = layer_scores(list(self.params.values()), before)
        summary = torch.cat([losses / max(1, steps), correct.view(1), high.view(1), scores])
        values = summary.tolist()  # the round's one device sync
        names = list(self.params)
        self.selected = tuple(names[i] for i in top_layers(values[6:], self.gamma))
        self.train_acc = values[4] / max(1, seen)
        upload = sum(self.sizes[name] for name in self.selected) * 4  # float32 values
        total = sum(p.numel() for p in self.params.values())
        return {
            "loss": values[0],
            "loss_cls": values[1],
            "loss_gen": values[2],
            "loss_elg": values[3],
            "train_acc": self.train_acc,
            "fisher_frac": values[5] / total,
            "gene_layers": float(len(self.selected)),
            "upload_bytes": float(upload),
        }

    @torch.no_grad()
    def predict(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        self.model.eval()
        return {"acc": self.model(x)}
