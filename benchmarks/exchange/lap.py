"""A lap of N client cores alone, no training and no coordinator, beside the bound of a
bandwidth-optimal ring all-reduce (``python -m benchmarks.exchange --parts lap`` runs it).

Every member contributes the same model state to one lap of ``RingLaps``, in chunks or as
one token (``schedule.chunked_laps``: always or never); the lap takes from the first member's
start to the last member's total. In process the cores answer on
``in_process.LocalClient`` threads; on Ray each core is an actor answering as a client actor
does (``receive`` of the wire format, ``lap_result``). The bound T = 2(N-1)·a + 2(N-1)/N·M/B
for M bytes takes a and B measured in the same run: in process, a is half a call's round trip
to a core's call threads and B a memory copy's throughput; on Ray, a is half a bare actor
call's round trip and B is M over the put of M bytes and their get by an actor, less one
round trip.
"""

from __future__ import annotations

import statistics
import threading
import time
import uuid
from datetime import timedelta
from typing import Any

import numpy as np
import ray
import torch
import torch.distributed as dist

from ring_actors.client.core import ClientCore
from ring_actors.client.method_factory import build_algorithm
from ring_actors.client.resources import ClientData
from ring_actors.config import Config, config_from_dict
from ring_actors.data.images import LabelledImages
from ring_actors.delivery.payload_checks import HEADROOM_BYTES
from ring_actors.delivery.rendezvous import LocalRendezvous, Rendezvous
from ring_actors.delivery.view import View
from ring_actors.in_process import LocalClient, LocalHandle
from ring_actors.models import build_backbone
from ring_actors.runtime.ray_rendezvous import RayRendezvous
from ring_actors.runtime.ray_transport import RayClientHandle

MIB = 2**20
SHAPE, CLASSES = (3, 32, 32), 10  # CIFAR-10, as benchmarks/hop.py
LAP = "exchange"
CORE_SHAPE = (1, 28, 28)  # the cores' own method: its model is not what the lap carries
# A row's kind: its schedule (chunked_laps, lap_engine); "engine" is torch.distributed's gloo
# all-reduce among the same members, timed beside a bare all-reduce of the same bytes.
LAP_KINDS = {
    "chunks": {"chunked_laps": "always", "lap_engine": "ring"},
    "token": {"chunked_laps": "never", "lap_engine": "ring"},
    "engine": {"chunked_laps": "never", "lap_engine": "collective"},
}


def timed_ms(call: Any) -> float:
    started = time.monotonic()
    call()
    return (time.monotonic() - started) * 1000


class QuietControl:
    """A coordinator that listens and answers nothing: the lap alone, no membership."""

    def __init__(self) -> None:
        self.events: list[tuple] = []

    def report_event(self, kind: Any, client_id: int, round_: int, detail: str = "", **_) -> None:
        self.events.append((str(kind), client_id, round_, detail))

    def __getattr__(self, name: str) -> Any:  # every other report: heard, not answered
        return lambda *args, **kwargs: None


def state_of(backbone: str) -> dict[str, torch.Tensor]:
    model = build_backbone(backbone, SHAPE, CLASSES)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def core_config(members: int, state_bytes: int, kind: str) -> Config:
    limit = (members + 1) * state_bytes + HEADROOM_BYTES
    return config_from_dict(
        {
            "experiment": {"rounds": 10**6},
            "clients": {"count": members},
            "algorithm": {"name": "fedavg"},
            "schedule": {"hop_timeout_s": 120, "max_payload_bytes": limit, **LAP_KINDS[kind]},
        }
    )


def make_core(config: Config, member: int, rendezvous: Rendezvous | None = None) -> ClientCore:
    x, y = np.zeros((4, *CORE_SHAPE), np.uint8), np.arange(4) % 2
    images = LabelledImages.from_arrays(x, y, (0.5,), (0.5,))
    method = build_algorithm(config, member, 2, CORE_SHAPE, torch.device("cpu"))
    data = ClientData(images, images, images)
    return ClientCore(member, config, method, data, QuietControl(), rendezvous=rendezvous)


def ring_view(members: int) -> View:
    return View(1, tuple(range(members)), (0,) * members)


def lap_span(spans: list[tuple[float, float, bool]]) -> tuple[float, bool]:
    """From the first start to the last end, ms; and whether every member got the total."""
    return (max(s[1] for s in spans) - min(s[0] for s in spans)) * 1000, all(s[2] for s in spans)


def laps_in_process(backbone: str, members: int, repeats: int, kind: str) -> dict[str, Any]:
    state = state_of(backbone)
    nbytes = sum(v.numel() * v.element_size() for v in state.values())
    rendezvous = LocalRendezvous()
    cores = [make_core(core_config(members, nbytes, kind), m, rendezvous) for m in range(members)]
    clients = [LocalClient(core) for core in cores]
    for core in cores:
        peers = {c.core.id: LocalHandle(c) for c in clients if c.core is not core}
        core.set_view(ring_view(members), peers)
    laps, finished = [], True
    for round_ in range(repeats + 1):
        spans: list[tuple[float, float, bool]] = []

        def member(core: ClientCore, round_: int = round_, spans: list = spans) -> None:
            started = time.monotonic()
            total = core.laps.run(LAP, round_, state)
            spans.append((started, time.monotonic(), total is not None))

        threads = [threading.Thread(target=member, args=(core,)) for core in cores]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        lap_ms, done = lap_span(spans)
        for core in cores:
            core.laps.forget_before(round_ + 1)
        if round_:
            laps.append(lap_ms)
            finished &= done
    rtt = [timed_ms(lambda: LocalHandle(clients[0]).ping().result()) for _ in range(20)]
    flat = torch.empty(nbytes, dtype=torch.uint8)
    copy = [timed_ms(lambda: torch.empty_like(flat).copy_(flat)) for _ in range(5)]
    for client in clients:
        client.calls.shutdown(wait=False)
    return _lap_row("in process", kind, backbone, members, nbytes, laps, finished, rtt, copy)


@ray.remote(num_cpus=0, max_concurrency=8)
class LapMember:
    """One client core on a Ray actor, answering its peers as a client actor does."""

    def __init__(self, member: int, members: int, backbone: str, kind: str, run: str) -> None:
        torch.set_num_threads(1)
        self.state = state_of(backbone)
        self.nbytes = sum(v.numel() * v.element_size() for v in self.state.values())
        self.member, self.members = member, members
        self.rendezvous = RayRendezvous(run)
        self.core = make_core(core_config(members, self.nbytes, kind), member, self.rendezvous)
        self.bare_group: Any = None

    def ready(self, epoch: int) -> bool:
        """Whether the engine's group of ``epoch`` formed (or none is wanted)."""
        engine = self.core.laps.engine
        if engine is None:
            return True
        group = engine.groups.get(epoch)
        return group is not None and group.ready.wait(60) and group.broken is None

    def join_bare(self) -> None:
        """A plain gloo group among the same processes, through the same rendezvous."""
        timeout = timedelta(seconds=120)
        key, host = "bare", self.rendezvous.host
        if self.member == 0:
            store = dist.TCPStore(host, 0, None, True, timeout, wait_for_workers=False)
            self.rendezvous.publish(key, f"{host}:{store.port}")
        else:
            address = self.rendezvous.lookup(key, 120)
            assert address is not None, "the bare group's store was never published"
            name, port = address.rsplit(":", 1)
            store = dist.TCPStore(name, int(port), None, False, timeout)
        self.bare_group = (dist.ProcessGroupGloo(store, self.member, self.members, timeout), store)

    def bare(self, data: np.ndarray) -> int:
        return int(data.size)

    def bare_all_reduce(self) -> tuple[float, float, bool]:
        """torch.distributed's own all-reduce of one float32 buffer of the state's bytes."""
        buffer = torch.ones(self.nbytes // 4, dtype=torch.float32)
        started = time.monotonic()
        self.bare_group[0].allreduce([buffer]).wait()
        return started, time.monotonic(), True

    def bare_agreement(self, round_: int, repeats: int = 20) -> float:
        """What the engine asks before each lap's sum, alone: one MAX all-reduce of four
        int64 (the layout's digest and the round, each beside its negation), ms. The first
        one waits for the last member's call to arrive; the ones timed after it do not."""
        ends = torch.tensor([1, -1, round_, -round_], dtype=torch.int64)
        options = dist.AllreduceOptions()
        options.reduceOp = dist.ReduceOp.MAX
        self.bare_group[0].allreduce([ends], options).wait()
        started = time.monotonic()
        for _ in range(repeats):
            self.bare_group[0].allreduce([ends], options).wait()
        return (time.monotonic() - started) * 1000 / repeats

    def set_view(self, view: View, handles: dict) -> None:
        self.core.set_view(view, handles)

    def receive(self, payload: Any) -> bool:
        return self.core.receive(payload)

    def lap_result(self, name: str, round_: int) -> Any:
        return self.core.lap_result(name, round_)

    def ping(self) -> int:
        return self.core.ping()

    def lap(self, round_: int) -> tuple[float, float, bool]:
        started = time.monotonic()
        total = self.core.laps.run(LAP, round_, self.state)
        ended = time.monotonic()
        self.core.laps.forget_before(round_)
        return started, ended, total is not None


def laps_on_ray(backbone: str, members: int, repeats: int, kind: str) -> list[dict[str, Any]]:
    """The lap's row; for the engine, rows of the bare all-reduce among the same actors and
    of the agreement the engine asks before it, the three alternating round by round."""
    run = uuid.uuid4().hex[:8]
    actors = [LapMember.remote(m, members, backbone, kind, run) for m in range(members)]
    handles = {m: RayClientHandle(actor) for m, actor in enumerate(actors)}
    ray.get([a.set_view.remote(ring_view(members), handles) for a in actors])
    assert all(ray.get([a.ready.remote(1) for a in actors])), "the engine's group did not form"
    engine = kind == "engine"
    if engine:
        ray.get([a.join_bare.remote() for a in actors])
    laps, bare, agreement, finished = [], [], [], True
    for round_ in range(repeats + 1):
        lap_ms, done = lap_span(ray.get([a.lap.remote(round_) for a in actors]))
        if engine:
            bare_ms, _ = lap_span(ray.get([a.bare_all_reduce.remote() for a in actors]))
            agree_ms = max(ray.get([a.bare_agreement.remote(round_) for a in actors]))
        if round_:
            laps.append(lap_ms)
            finished &= done
            if engine:
                bare.append(bare_ms)
                agreement.append(agree_ms)
    nbytes = sum(v.numel() * v.element_size() for v in state_of(backbone).values())
    rtt = [timed_ms(lambda: ray.get(actors[-1].ping.remote())) for _ in range(20)]
    data = np.zeros(nbytes, np.uint8)
    put_get = [timed_ms(lambda: ray.get(actors[-1].bare.remote(data))) for _ in range(5)]
    for actor in actors:
        ray.kill(actor)
    moved = [max(t - statistics.median(rtt), 1e-3) for t in put_get]
    rows = [_lap_row("ray", kind, backbone, members, nbytes, laps, finished, rtt, moved)]
    if engine:
        rows.append(_lap_row("ray", "bare", backbone, members, nbytes, bare, True, rtt, moved))
        agreed = _lap_row("ray", "agreement", backbone, members, 32, agreement, True, rtt, moved)
        rows.append(agreed)
    return rows


def _lap_row(
    where: str,
    kind: str,
    backbone: str,
    members: int,
    nbytes: int,
    laps: list[float],
    finished: bool,
    rtt_ms: list[float],
    move_ms: list[float],
) -> dict[str, Any]:
    a_ms = statistics.median(rtt_ms) / 2
    bytes_per_ms = nbytes / statistics.median(move_ms)
    n = members
    bound_ms = 2 * (n - 1) * a_ms + 2 * (n - 1) / n * nbytes / bytes_per_ms
    return {
        "part": "lap",
        "where": where,
        "kind": kind,
        "backbone": backbone,
        "members": members,
        "mb": nbytes / MIB,
        "laps": len(laps),
        "finished": finished,
        "lap_ms": statistics.median(laps),
        "a_ms": a_ms,
        "B_gb_per_s": bytes_per_ms / 1e6,
        "bound_ms": bound_ms,
    }
