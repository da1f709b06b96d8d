"""Our ``ua_pdfl`` against the authors' released UA-PDFL code on one shared setting.

    python -m benchmarks.ua_pdfl_official --official /tmp/ua-pdfl-794321d5 \
        --clients 8 --samples 300 --partition dirichlet:0.5 --rounds 15 --peers 3 \
        --threshold 0.1 --seeds 0 1 2

``--official`` is a checkout of ``Kuludu/UA-PDFL`` at commit 794321d5 (its ``models/`` and
``utils/`` folders); its device and model classes are imported from there and run unchanged.
Nothing of it is copied here. Its ``run_exp.py`` needs ``medmnist`` and torchvision downloads, so
this driver builds the devices itself and repeats its synchronous loop: every device samples its
peers (``communicate``), then every device in turn aggregates, evaluates and trains (``train``).

Both sides get the same partitions, the same local and global test sets and the same options
(lr, decay, momentum 0.5, threshold, mu, peers per round, batch, epochs); ours runs on the
in-process ring (``benchmarks.fidelity_ring.run_ring``, sync mode) on the dynamic topology with
``divergence=js``, the measure the official code computes. What stays different is each
side's own: the official ``SimpleCNN`` against our ``cnn`` backbone, and the official rules
themselves (see HISTORY.md). Per round and client the JSON keeps the decision (dropout, peers
pulled whole, peers pulled for the extractor only), the sampled peers and their divergences
(ours from each client's round report), and Local-T and Global-T after training (the official
code's own Local-T, measured before training, is kept as ``local_before``). Decision counts
and divergence figures start at round 1: the official devices also merge in round 0, from their
independent random initialisations, where ours have nothing offered yet.

``--sides`` may add controls of the official code, ``official+<variant>[+<variant>...]``, that
change only how the driver runs its devices (``VARIANTS``): ``snapshot`` copies the peers'
weights when they are sampled (the released ``get_device_info`` hands out live ``state_dict``
tensors, so a device merging after a sampled peer trained gets that peer's round-r weights),
``fresh-sgd`` drops the momentum carried across rounds, ``conv-split`` shares only the
convolutions with dissimilar peers (the released split also averages the 512-unit layer),
``our-cnn`` runs the released device on our ``cnn`` backbone (split as its ``SimpleCNN``) and
``shared-init`` starts every device from one initialisation, as ours do.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import io
import json
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

from benchmarks.common import RESULTS, markdown_table, mean_std
from benchmarks.fidelity_ring import Setting, ring_data, run_ring
from ring_actors.data.images import LabelledImages
from ring_actors.data.sources import DatasetArrays, load_dataset
from ring_actors.models import build_backbone

OFFICIAL_COMMIT = "794321d518ccf14724e15ac61eddd869fc1bf95d"


@dataclasses.dataclass(frozen=True)
class Shared:
    """The method options both sides run with."""

    lr: float = 0.05
    lr_decay: float = 0.95
    threshold: float = 0.1
    mu: float = 0.01
    peers: int = 3


def _loader(images: LabelledImages, batch: int, shuffle: bool) -> DataLoader:
    x = images.normalise(images.x)
    return DataLoader(TensorDataset(x, images.y), batch_size=batch, shuffle=shuffle)


def _decision(printed: str, device) -> dict:
    """One official device's decision, from what it prints at verbose 2 and its own fields.

    It prints the divergences to its sampled peers and, per peer, how many leading state-dict
    keys it averages: all of them (``num_model_layers``) or the extractor only. Dropout is its
    own copy condition: every divergence strictly below the threshold.
    """
    lists = [
        [float(v) for v in line.strip("[]").split(",")]  # float() also reads nan and inf
        for line in printed.splitlines()
        if line.startswith("[")
    ]
    divergences, layers = lists[0], [int(n) for n in lists[1]]
    below = sum(d < device.inference_threshold for d in divergences)
    dropout = below == device.num_communicate_clients
    full = device.num_model_layers
    return {
        "dropout": dropout,
        "whole": 1 if dropout else sum(n == full for n in layers),
        "feature_only": 0 if dropout else sum(n < full for n in layers),
        "divergences": divergences,
        "peers": [info["id"] for info in device.remote_device_infos],
    }


def _accuracy(acc_count, device, loader: DataLoader) -> float:
    """A device's accuracy through the official ``acc_count``."""
    correct, total = acc_count(device.model, loader, torch.device("cpu"))
    return correct / total


VARIANTS = {
    "snapshot": "peers' weights copied when sampled, so every device merges round r - 1 states",
    "fresh-sgd": "a new SGD (momentum 0.5, the decayed lr) every round: no momentum carried",
    "conv-split": "only the 4 convolution tensors count as the extractor (ours and the paper)",
    "our-cnn": "our cnn backbone in place of SimpleCNN, split as SimpleCNN (extractor up to fc512)",
    "shared-init": "every device starts from device 0's initial weights, as ours do",
}


def _our_cnn(base_nn: type) -> type:
    """Our ``cnn`` backbone under the official model interface (``head`` is the extractor)."""

    class OurCNN(base_nn):
        def __init__(self, out_channels: int, in_channels: int, img_size: int) -> None:
            super().__init__()
            backbone = build_backbone("cnn", (in_channels, img_size, img_size), out_channels)
            self.head, self.base = backbone.body, backbone.head
            self.layer_size = [v.numel() for v in self.state_dict().values()]
            self.num_feature_extractor_layers = 6  # convolutions and fc512, as in SimpleCNN

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.base(self.head(x))

    return OurCNN


def _official_modules(path: Path) -> tuple:
    """``ProposedDevice``, ``SimpleCNN``, ``acc_count`` and ``DeviceLogger`` from the checkout."""
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
    from models import devices, nn  # noqa: PLC0415 - from the checkout given
    from utils import evaluate, logger  # noqa: PLC0415

    for module in (devices, nn, evaluate, logger):
        if not Path(module.__file__).resolve().is_relative_to(path.resolve()):
            raise ImportError(f"{module.__name__} comes from {module.__file__}, not {path}")
    return devices.ProposedDevice, nn, evaluate.acc_count, logger.DeviceLogger


def run_official(
    path: Path,
    setting: Setting,
    shared: Shared,
    arrays: DatasetArrays,
    seed: int,
    variants: frozenset[str] = frozenset(),
) -> dict:
    """The released ``ProposedDevice`` on our partitions; returns per-round records.

    ``variants`` (keys of ``VARIANTS``) change only how this driver runs the devices, never
    their code: the controls that tell which official trait moves the figures.
    """
    ProposedDevice, official_nn, acc_count, DeviceLogger = _official_modules(path)  # noqa: N806
    model = _our_cnn(official_nn.BaseNN) if "our-cnn" in variants else official_nn.SimpleCNN
    clients = ring_data(setting, arrays, seed)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    channels, size = arrays.input_shape[0], arrays.input_shape[1]
    params = (arrays.num_classes, channels, size)
    with contextlib.redirect_stdout(io.StringIO()):
        devices = [
            ProposedDevice(
                i, model, params, shared.lr, shared.lr_decay, shared.threshold,
                shared.mu, shared.peers, torch.device("cpu"), setting.local_epochs,
                _loader(c.train, setting.batch_size, True),
                _loader(c.local_test, 512, False),
                DeviceLogger(i, "ua_pdfl_vs_official"), 2,
            )
            for i, c in enumerate(clients)
        ]  # fmt: skip
    if "conv-split" in variants:
        for device in devices:
            device.num_feature_extractor_layers = 4  # conv1 and conv2, weights and biases
    if "shared-init" in variants:
        for device in devices[1:]:
            device.model.set_weights(devices[0].model.get_weights())
            device.device_representations = device.compute_representations()
    global_loader = _loader(clients[0].global_test, 512, False)
    accuracy = functools.partial(_accuracy, acc_count)
    rounds, started = [], time.monotonic()
    for round_ in range(setting.rounds):
        for device in devices:
            device.communicate([d for d in devices if d is not device])
        if "snapshot" in variants:  # it hands out live state_dict tensors otherwise
            for device in devices:
                for info in device.remote_device_infos:
                    info["weights"] = {k: v.clone() for k, v in info["weights"].items()}
        decisions = []
        for device in devices:
            if "fresh-sgd" in variants:
                lr = device.optimizer.param_groups[0]["lr"]
                device.optimizer = torch.optim.SGD(device.model.parameters(), lr=lr, momentum=0.5)
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                device.train()
            decisions.append(_decision(printed.getvalue(), device))
        rounds.append(
            {
                "round": round_,
                "local": [accuracy(d, d.test_loader) for d in devices],
                "global": [accuracy(d, global_loader) for d in devices],
                "local_before": [
                    d.device_logger.get_latest_log("local_acc") / 100 for d in devices
                ],
                "decisions": decisions,
            }
        )
    return {
        "side": "+".join(["official", *sorted(variants)]),
        "seed": seed,
        "train_s": time.monotonic() - started,
        "rounds": rounds,
    }


def run_ours(setting: Setting, shared: Shared, arrays: DatasetArrays, seed: int) -> dict:
    """``ua_pdfl`` on the in-process ring on the dynamic topology, evaluated every round;
    each decision read from the client's report of the round it trained after."""
    overrides = {
        "lr": shared.lr,
        "lr_decay": shared.lr_decay,
        "momentum": 0.5,
        "threshold": shared.threshold,
        "mu": shared.mu,
        "divergence": "js",
    }
    ours = dataclasses.replace(setting, topology="dynamic", degree=shared.peers, eval_every=1)
    run = run_ring("ua_pdfl", overrides, ours, arrays, seed)
    if len(run["rounds"]) != setting.rounds:
        raise RuntimeError(f"{len(run['rounds'])} rounds reported, expected {setting.rounds}")
    for record in run["rounds"]:
        record["decisions"] = [our_decision(m) for m in record["client_metrics"]]
    return {"side": "ours", "seed": seed, "train_s": run["train_s"], "rounds": run["rounds"]}


def our_decision(metrics: dict[str, float]) -> dict | None:
    """A client's decision from its round report: its dropout, the share of similar peers
    and each peer's divergence (``divergence_from_<peer>``); None where it decided nothing."""
    if "dropout" not in metrics:
        return None  # round 0: nothing offered yet
    prefix = "divergence_from_"
    peers = sorted(int(k[len(prefix) :]) for k in metrics if k.startswith(prefix))
    whole = round(metrics["similar_fraction"] * max(1, len(peers)))
    dropout = bool(metrics["dropout"])
    return {
        "dropout": dropout,
        "whole": 1 if dropout else whole,
        "feature_only": 0 if dropout else len(peers) - whole,
        "divergences": [metrics[f"{prefix}{p}"] for p in peers],
        "peers": peers,
    }


def _decided(run: dict) -> list[dict]:
    """Decisions from round 1 on: the official devices also merge in round 0, from random
    initialisations (so every divergence is ~1e-4 and all of them drop out); ours start at 1."""
    return [d for r in run["rounds"] if r["round"] >= 1 for d in r["decisions"] if d is not None]


def describe(run: dict, last: int) -> dict[str, float]:
    """Accuracies over the last rounds; decisions and per-peer divergences from round 1 on."""
    tail = run["rounds"][-last:]
    decided = _decided(run)
    divergences = [v for d in decided for v in d["divergences"]]
    return {
        "local": statistics.fmean(statistics.fmean(r["local"]) for r in tail),
        "global": statistics.fmean(statistics.fmean(r["global"]) for r in tail),
        "dropout": statistics.fmean(d["dropout"] for d in decided),
        "whole": statistics.fmean(d["whole"] for d in decided),
        "feature_only": statistics.fmean(d["feature_only"] for d in decided),
        "divergence_min": min(divergences),
        "divergence_median": statistics.median(divergences),
        "divergence_max": max(divergences),
    }


def curves(runs: list[dict], key: str) -> dict[str, list[float]]:
    """Per side, the seed mean per round of the client mean of ``key`` (where recorded)."""
    out: dict[str, list[list[float]]] = {}
    for run in runs:
        if key in run["rounds"][0]:
            values = [statistics.fmean(r[key]) for r in run["rounds"]]
            out.setdefault(run["side"], []).append(values)
    return {
        side: [statistics.fmean(v) for v in zip(*rows, strict=True)] for side, rows in out.items()
    }


def divergence_curves(runs: list[dict]) -> dict[str, list[list[float] | None]]:
    """Per side and round, [min, median, max] of every per-peer divergence over seeds."""
    out: dict[str, list[list[float]]] = {}
    for run in runs:
        per_round = out.setdefault(run["side"], [[] for _ in run["rounds"]])
        for i, record in enumerate(run["rounds"]):
            for d in record["decisions"]:
                if d is not None:
                    per_round[i].extend(d["divergences"])
    return {
        side: [[min(v), statistics.median(v), max(v)] if v else None for v in rows]
        for side, rows in out.items()
    }


def _cell(rows: list[dict], key: str, scale: float = 1.0, digits: int = 2) -> str:
    return mean_std([r[key] for r in rows], scale, digits)


def table(runs: list[dict], last: int) -> str:
    """Markdown: one row per side, mean ± std over seeds; the divergence range pools them."""
    header = ["side", "Local-T", "Global-T", "dropout (copy one peer)", "peers pulled whole",
              "peers pulled extractor only", "divergence median", "divergence range"]  # fmt: skip
    lines = []
    for side in dict.fromkeys(r["side"] for r in runs):
        rows = [describe(r, last) for r in runs if r["side"] == side]
        cell = functools.partial(_cell, rows)
        low = min(r["divergence_min"] for r in rows)
        high = max(r["divergence_max"] for r in rows)
        lines.append([side, cell("local", 100, 1), cell("global", 100, 1), cell("dropout"),
                      cell("whole"), cell("feature_only"), cell("divergence_median", 1, 3),
                      f"{low:.4f} - {high:.3f}"])  # fmt: skip
    return markdown_table(header, lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--official", type=Path, help="the official checkout (official sides)")
    parser.add_argument("--sides", nargs="+", default=["official", "ours"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--out", type=Path, default=RESULTS / "ua_pdfl_official.json")
    parser.add_argument("--dataset", default="fashion-mnist")
    parser.add_argument("--root", default=None)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--partition", default="dirichlet:0.5")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--local-epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--local-max", type=int, default=300)
    parser.add_argument("--global-max", type=int, default=1000)
    parser.add_argument("--last", type=int, default=3)
    for field in dataclasses.fields(Shared):
        parser.add_argument("--" + field.name.replace("_", "-"), type=type(field.default),
                            default=field.default)  # fmt: skip
    args = parser.parse_args(argv)
    for side in args.sides:
        name, *variants = side.split("+")
        if side != "ours" and (name != "official" or not set(variants) <= VARIANTS.keys()):
            parser.error(
                f"--sides: {side!r} is not ours, official or official+{{{','.join(VARIANTS)}}}"
            )
        if side != "ours" and args.official is None:
            parser.error(f"--sides {side} needs --official, a checkout of Kuludu/UA-PDFL")
    command = " ".join(["python -m benchmarks.ua_pdfl_official", *(argv or sys.argv[1:])])
    torch.set_num_threads(1)
    setting = Setting(
        dataset=args.dataset, root=args.root, clients=args.clients,
        partition=args.partition, samples=args.samples, rounds=args.rounds,
        local_epochs=args.local_epochs, batch_size=args.batch_size, eval_every=1,
        last=args.last, global_max=args.global_max, local_max=args.local_max,
    )  # fmt: skip
    shared = Shared(**{f.name: getattr(args, f.name) for f in dataclasses.fields(Shared)})
    arrays = load_dataset(setting.dataset, setting.root, download=False)
    runs = []
    for seed in args.seeds:
        for side in args.sides:
            if side == "ours":
                run = run_ours(setting, shared, arrays, seed)
            else:
                _, *variants = side.split("+")
                run = run_official(
                    args.official, setting, shared, arrays, seed, frozenset(variants)
                )
            runs.append(run)
            s = describe(run, args.last)
            print(
                f"{side} seed {seed}: Local-T {100 * s['local']:.1f} Global-T "
                f"{100 * s['global']:.1f} dropout {s['dropout']:.2f} whole {s['whole']:.2f} "
                f"extractor-only {s['feature_only']:.2f} ({run['train_s']:.0f} s)",
                flush=True,
            )
            record = {
                "command": command,
                "official_commit": OFFICIAL_COMMIT,
                "variants": VARIANTS,
                "setting": dataclasses.asdict(setting),
                "shared": dataclasses.asdict(shared),
                "curves": {k: curves(runs, k) for k in ("local", "global", "local_before")},
                "divergence_curves": divergence_curves(runs),
                "runs": runs,
            }
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(record, indent=1))
    print(table(runs, args.last))


if __name__ == "__main__":
    main()
