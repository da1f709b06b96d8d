"""A lap summed by an existing collective engine: torch.distributed's gloo all-reduce among
the lap's members, under the ring's fault tolerance.

The ring lap takes 2(N-1) actor calls one after another; the engine pipelines chunks between
the same processes over TCP and does the same exact sum several times faster on the same
cores (``benchmarks/RESULTS.md``). What the engine lacks is what the ring exists for: a
member that dies or hangs inside a collective blocks or kills the others. So the engine
goes only where a group formed, each call has a deadline from the schedule's timeouts, and
any failure falls back to the ring lap (``ring_lap.py``), which is exact over whoever
contributed and hands a member that finished here the same total.

One process group per membership epoch (a view that changes pace alone keeps it): the
view's first member hosts the group's store and publishes its address through the run's
rendezvous (Ray's key-value store on a cluster); the others look it up. A group forms as
the view arrives, on a thread of its own, so forming overlaps training; the next epoch's
group replaces it. A member of epoch e holds epoch e's group only, so it can never add into
epoch e + 1's sum. Members first agree on the layout of what they add (one tiny all-reduce
of its digest), so no contribution of another shape ever enters the sum, and on the round
they sum: members of one epoch a round apart (a resume from checkpoints of different
rounds) take the ring lap until they meet again.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Protocol

import torch
import torch.distributed as dist

from ring_actors.client.chunk_layout import Layout, layout_of, rebuild
from ring_actors.client.flat_buffers import FlatBuffers
from ring_actors.client.lap_host import LapResult, LapRun
from ring_actors.delivery.event_kinds import EventKind
from ring_actors.delivery.rendezvous import Rendezvous
from ring_actors.delivery.view import View

if TYPE_CHECKING:
    from ring_actors.client.ring_lap import RingLaps

log = logging.getLogger(__name__)

Tensors = dict[str, torch.Tensor]
KEPT_GROUPS = 2  # the epoch in use and the one forming
ENGINE_ATTEMPT = -2  # a total the engine summed: it does not go round, unlike a token's (-1)


class EngineHost(Protocol):
    """What the engine tells its client: events for the run's record, and the bytes a lap
    moved (the run's traffic counts them as the outbox's)."""

    id: int

    def event(self, kind: EventKind, round_: int, detail: str = "", **measured: float) -> None: ...

    def count_collective(self, nbytes: int, members: int) -> None: ...


@dataclass(eq=False)
class LapGroup:
    """One epoch's process group: its members in view order, this member's rank, and why
    it cannot be used (a failed formation, or a failed call: a gloo group is not reusable
    after one)."""

    key: str
    epoch: int
    members: tuple[int, ...]
    rank: int
    ready: threading.Event = field(default_factory=threading.Event)
    process_group: dist.ProcessGroup | None = None
    store: dist.Store | None = None
    broken: str | None = None


def layout_digest(name: str, layout: Layout) -> int:
    """56 bits of a digest of the lap's name and layout: equal on members whose
    contributions fit the same sum."""
    text = repr((name, layout.shapes)).encode()
    digest = hashlib.blake2b(text, digest_size=7).digest()
    return int.from_bytes(digest, "big") + 1  # 0 stands for "nothing to add"


class CollectiveLaps:
    """One client's side of the engine: groups by epoch, and a lap as one collective."""

    def __init__(
        self,
        host: EngineHost,
        rendezvous: Rendezvous,
        deadline_s: float,
        silent_disagreement: bool,
    ) -> None:
        self.host = host
        self.rendezvous = rendezvous
        self.deadline_s = deadline_s  # every formation and call ends within it
        self.silent_disagreement = silent_disagreement  # auto: an expected fallback
        self.groups: dict[int, LapGroup] = {}
        self.disagreed: set[tuple[int, str]] = set()  # (epoch, lap): ring lap for the rest
        self.ring_through: dict[tuple[int, str], int] = {}  # (epoch, lap): its last ring round
        self.buffers = FlatBuffers()  # what the laps are summed in: their totals are views
        self.lock = threading.Lock()

    # ---- forming, as a view arrives -----------------------------------------------------

    def on_view(self, view: View) -> None:
        """Start forming the view's group (at most one per epoch), off the caller's thread."""
        members = view.members
        if len(members) < 2 or self.host.id not in members:
            return
        with self.lock:
            epoch = view.members_epoch  # a change of pace alone keeps the group
            if epoch in self.groups or any(e > epoch for e in self.groups):
                return
            group = LapGroup(
                key=f"lap-group/{epoch}/{'-'.join(map(str, members))}",
                epoch=epoch,
                members=members,
                rank=members.index(self.host.id),
            )
            self.groups[epoch] = group
            for old in sorted(self.groups)[:-KEPT_GROUPS]:
                self._tear_down(self.groups.pop(old))
            self._forget_before(min(self.groups))
        threading.Thread(
            target=self._form, args=(group,), name=f"lap-group-{group.epoch}", daemon=True
        ).start()

    def _forget_before(self, epoch: int) -> None:
        """Drop the per-lap marks of epochs whose group is gone: a run of many view changes
        keeps only what its live groups may still read."""
        self.disagreed = {key for key in self.disagreed if key[0] >= epoch}
        self.ring_through = {key: r for key, r in self.ring_through.items() if key[0] >= epoch}

    def _form(self, group: LapGroup) -> None:
        started = time.monotonic()
        timeout = timedelta(seconds=self.deadline_s)
        try:
            host = self.rendezvous.host
            if group.rank == 0:
                store = dist.TCPStore(host, 0, None, True, timeout, wait_for_workers=False)
                self.rendezvous.publish(group.key, f"{host}:{store.port}")
            else:
                address = self.rendezvous.lookup(group.key, self.deadline_s)
                if address is None:
                    raise TimeoutError(f"no store published in {self.deadline_s:g} s")
                store_host, port = address.rsplit(":", 1)
                store = dist.TCPStore(store_host, int(port), None, False, timeout)
            options = dist.ProcessGroupGloo._Options()
            options._timeout = timeout
            options._devices = [dist.ProcessGroupGloo.create_device(hostname=host)]
            prefixed = dist.PrefixStore(group.key, store)
            group.store = store
            group.process_group = dist.ProcessGroupGloo(
                prefixed, group.rank, len(group.members), options
            )
        except Exception as err:  # noqa: BLE001 - a refused rendezvous or port: the ring lap
            if not group.broken:  # else a round that could not wait for it said so already
                group.broken = f"group of epoch {group.epoch} did not form: {_first_line(err)}"
                log.warning("client %d: %s; laps go round the ring", self.host.id, group.broken)
                self.host.event(EventKind.LAP_ENGINE_FALLBACK, -1, group.broken)
        else:
            if group.rank == 0:
                formed_s = time.monotonic() - started
                detail = f"epoch {group.epoch}, members {list(group.members)}"
                self.host.event(EventKind.LAP_GROUP_FORMED, -1, detail, duration_s=formed_s)
        finally:
            group.ready.set()

    def _tear_down(self, group: LapGroup) -> None:
        if group.rank == 0:
            self.rendezvous.withdraw(group.key)
        group.broken = group.broken or "replaced by a newer epoch's group"
        group.process_group = group.store = None

    # ---- a lap --------------------------------------------------------------------------

    def run(
        self, name: str, round_: int, contribution: Tensors, view: View, time_left_s: float
    ) -> Tensors | None:
        """The lap's total over every member of ``view``, the same bits on each; None when
        the engine cannot give it (no group, members that do not all run the round, layouts
        that disagree, a member that failed inside the call): the ring lap goes then."""
        group = self._usable(name, round_, view, time_left_s)
        if group is None:
            return None
        layout = layout_of(contribution)
        digest = layout_digest(name, layout) if contribution else 0
        try:
            agreed, rounds = self._all_agree(group, digest, round_)
            if rounds[0] != rounds[1]:
                self.ring_through[(group.epoch, name)] = rounds[1]
                detail = f"lap {name!r}: members at rounds {rounds[0]}-{rounds[1]}, the ring lap"
                self.host.event(EventKind.LAP_ENGINE_FALLBACK, round_, detail)
                return None
            if not agreed or digest == 0:
                self.disagreed.add((group.epoch, name))
                if not self.silent_disagreement:
                    detail = f"lap {name!r}: the members' contributions differ in layout"
                    self.host.event(EventKind.LAP_ENGINE_FALLBACK, round_, detail)
                return None
            flat = self.buffers.flatten(name, contribution, layout)
            for segment in flat.values():
                self._reduce(group, segment, dist.ReduceOp.SUM)
                self.host.count_collective(
                    segment.numel() * segment.element_size(), len(view.members)
                )
        except Exception as err:  # noqa: BLE001 - a member died, hung or refused: ring lap
            group.broken = f"lap {name!r} of round {round_} failed: {_first_line(err)}"
            group.process_group = None
            self.host.event(EventKind.LAP_ENGINE_FALLBACK, round_, group.broken)
            return None
        return rebuild(flat, layout, own_memory=False)  # one buffer per dtype, no copy

    def _usable(self, name: str, round_: int, view: View, time_left_s: float) -> LapGroup | None:
        """The view's formed group, if the engine may sum this lap: every member runs the
        round, the lap's layouts agreed this epoch, and the time budget is not over."""
        epoch = view.members_epoch
        group = self.groups.get(epoch)
        if group is None or (epoch, name) in self.disagreed or time_left_s <= 0:
            return None
        if round_ <= self.ring_through.get((epoch, name), -1):  # the others went round
            return None
        if view.active(round_) != view.members:  # a joiner before its first round
            return None
        wait_s = min(self.deadline_s, time_left_s)
        if not group.ready.wait(wait_s):
            # Its peers may call into the group meanwhile: they fall back at the deadline, and
            # this member must never enter the group later, alone, so it is done for.
            group.broken = f"group of epoch {epoch} not formed within the round's {wait_s:.1f} s"
            self.host.event(EventKind.LAP_ENGINE_FALLBACK, round_, group.broken)
            return None
        return None if group.broken or group.process_group is None else group

    def _all_agree(self, group: LapGroup, digest: int, round_: int) -> tuple[bool, tuple[int, int]]:
        """Whether every member adds the same layout, and the lowest and highest round the
        members sum: one MAX of each value and of its negation gives both ends."""
        ends = torch.tensor([digest, -digest, round_, -round_], dtype=torch.int64)
        self._reduce(group, ends, dist.ReduceOp.MAX)
        return int(ends[0]) == -int(ends[1]), (-int(ends[3]), int(ends[2]))

    def _reduce(self, group: LapGroup, tensor: torch.Tensor, op: dist.ReduceOp) -> None:
        """One all-reduce in place, ended by the deadline at the latest."""
        assert group.process_group is not None
        options = dist.AllreduceOptions()
        options.reduceOp = op
        options.timeout = timedelta(seconds=self.deadline_s)
        host_tensor = tensor if tensor.device.type == "cpu" else tensor.cpu()
        work = group.process_group.allreduce([host_tensor], options)
        if not work.wait(timedelta(seconds=self.deadline_s)):
            raise TimeoutError(f"all-reduce not done in {self.deadline_s:g} s")
        if host_tensor is not tensor:
            tensor.copy_(host_tensor)


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"[:300]


class EngineLap:
    """The engine as a way of one lap: one collective call among the view's members, tried
    once before the ways that go round the ring, its total kept as any total is (members a
    round behind fetch it, a token or chunk of a member that fell back is answered with it)."""

    def __init__(self, laps: RingLaps, run: LapRun, engine: CollectiveLaps) -> None:
        self.laps, self.run, self.engine = laps, run, engine
        self.tried = False

    def wanted(self, view: View) -> bool:
        return not self.tried

    def start_due(self, view: View, leader: int | None, now: float) -> LapResult | None:
        self.tried = True
        run, host = self.run, self.laps.host
        total = self.engine.run(run.name, run.round, run.contribution, view, host.time_left())
        if total is None:  # the ring's ways go now, and their give-up counts from here
            run.start_clock(self.laps.timeouts.lap_give_up_s, host.time_left())
            return None
        origin = (-1 if leader is None else leader, view.epoch, ENGINE_ATTEMPT)
        return self.laps.keep(run.key, LapResult(total, view.members), origin)

    def take(self, view: View, leader: int | None) -> LapResult | None:
        return None  # the engine's messages go over its own sockets

    def waiting_on(self, epoch: int) -> bool:
        return False
