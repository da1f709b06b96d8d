"""What a client's round computes: merge and train, the method's laps, and the scores of the
model, each on the device while the client holds its compute slot; and the extra time a
slower device takes, slept outside it."""

from __future__ import annotations

import resource
import sys
import time
from dataclasses import dataclass
from typing import Protocol

from ring_actors.algorithms import Algorithm
from ring_actors.client.exchange import NonFiniteError
from ring_actors.client.isolation_and_noise import ExchangeControl
from ring_actors.client.lap_arithmetic import lap_checksum
from ring_actors.client.resources import ClientData
from ring_actors.client.ring_lap import RingLaps
from ring_actors.client.slot_release import IdleRelease
from ring_actors.client.state import Events
from ring_actors.delivery.event_kinds import EventKind
from ring_actors.delivery.payloads import Payload, all_finite
from ring_actors.heterogeneity.model import Heterogeneity


class TrainingHost(Events, Protocol):
    """What training asks of its client: the method now (a restore replaces it) and the
    budget left."""

    algorithm: Algorithm

    def time_left(self) -> float: ...


@dataclass(frozen=True)
class Trained:
    """A round's training: the method's metrics, the wall and thread CPU seconds it took
    (below the wall time when work beside the slot holders takes the core, or with several
    torch threads) and the slower device's extra seconds. The CPU counts the merge of what
    was taken: ``merge_cpu_s`` is that part, the averaging a lap method does outside it."""

    metrics: dict[str, float]
    train_s: float
    train_cpu_s: float
    merge_cpu_s: float
    slowed_s: float


class Training:
    """One client's compute: what it takes of its peers merged, its data trained on, its
    model scored."""

    def __init__(
        self,
        client_id: int,
        data: ClientData,
        slots: IdleRelease,
        control: ExchangeControl,  # ``schedule.exchange``: what is merged and lapped
        laps: RingLaps,
        hetero: Heterogeneity,
        host: TrainingHost,
    ) -> None:
        self.id = client_id
        self.data = data
        self.slots = slots
        self.device = slots.device
        self.control = control
        self.laps = laps
        self.hetero = hetero
        self.host = host

    def train(self, round_: int, received: list[Payload]) -> Trained:
        """Merge what was taken and train, holding a compute slot; then a slower device's
        extra time."""
        with self.slots.hold(round_):
            computing, computing_cpu = time.monotonic(), time.thread_time()
            method = self.host.algorithm
            method.begin_round(round_)
            taken = self.control.taken(received)
            method.merge([p.to(self.device) for p in taken])
            merge_cpu_s = time.thread_time() - computing_cpu
            metrics = method.train_round(self.data.train)
            train_s = time.monotonic() - computing
            train_cpu_s = time.thread_time() - computing_cpu
        slowed_s = self._slow_down(round_, train_s)
        return Trained(metrics, train_s, train_cpu_s, merge_cpu_s, slowed_s)

    def _slow_down(self, round_: int, train_s: float) -> float:
        """A slower device's extra time, slept outside the slot (never past the budget)."""
        slowed_s = min(self.hetero.compute_delay(self.id, train_s), max(0.0, self.host.time_left()))
        if slowed_s > 0:
            factor = self.hetero.speed_factor(self.id)
            self.host.event(
                EventKind.COMPUTE_DELAY, round_, f"speed factor {factor:g}", duration_s=slowed_s
            )
            time.sleep(slowed_s)
        return slowed_s

    def run_laps(self, round_: int, metrics: dict[str, float]) -> None:
        """Each of the method's laps this round: contribute, apply the one total every
        member gets, and record what lets anyone check it did. A non-finite contribution is
        refused at the source (the others' lap goes on); it, or non-finite training
        metrics, raise :class:`NonFiniteError` once the laps are over."""
        non_finite = sorted(k for k, v in metrics.items() if not _finite(v))
        method = self.host.algorithm
        for name in self.control.laps(method.laps(round_)):
            with self.slots.resident():
                made = method.contribute(name, round_)
                contribution = {k: v.detach() for k, v in made.items()}  # chunks add there
            if not all_finite(contribution):
                self.host.event(EventKind.NON_FINITE_CONTRIBUTION, round_, f"lap {name!r}")
                non_finite.append(f"lap {name}")
                contribution = {}
            if contribution:  # what this member put in, for anyone auditing the total
                metrics[f"lap_{name}_contribution"] = lap_checksum(contribution)
            result = self.laps.run(name, round_, contribution)
            if result is not None:
                with self.slots.resident():  # the total leaves the device with the call
                    total = {k: v.to(self.device) for k, v in result.total.items()}
                    method.apply_lap(name, round_, total, list(result.contributors))
                    del total  # before the cache is returned as the call ends
                metrics[f"lap_{name}_contributors"] = float(len(result.contributors))
                metrics[f"lap_{name}_checksum"] = lap_checksum(result.total)
        if non_finite:
            raise NonFiniteError(f"round {round_}: non-finite {', '.join(non_finite)}")

    def evaluate(self, round_: int) -> dict[str, float]:
        """Local-T and Global-T scores and the method's diagnostics."""
        scores: dict[str, float] = {}
        with self.slots.hold(round_):
            method = self.host.algorithm
            for prefix, data in (
                ("local", self.data.local_test),
                ("global", self.data.global_test),
            ):
                scores.update({f"{prefix}_{k}": v for k, v in method.evaluate(data).items()})
            diagnostics = method.diagnostics(self.data.local_test)
            scores.update({f"diag_{k}": v for k, v in diagnostics.items()})
        return scores


def scored(metrics: dict[str, float]) -> bool:
    """Whether a round's report carries its model's scores (``evaluate``'s, as the
    coordinator tells an evaluated round)."""
    return any(k.startswith("local_") for k in metrics)


def peak_rss_mb() -> float:
    """This process's peak resident memory: many actors share one host, so growth matters."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10  # bytes there, KiB here


def _finite(value: float) -> bool:
    return value == value and value not in (float("inf"), float("-inf"))
