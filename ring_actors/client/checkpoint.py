"""A client's checkpoint, read as data and never code.

A client's private state is a torch file read with torch's weights-only loader and an allowlist
of classes (the project's own, torch's modules, a plug-in's method and model; never a function),
so a checkpoint directory on a shared filesystem is not a way into every node.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import torch

from ring_actors.algorithms.base import Algorithm, AlgorithmOptions
from ring_actors.client.checkpoint_writer import CheckpointWriter
from ring_actors.client.lap_totals import LapTotalFiles
from ring_actors.client.ring_lap import RingLaps
from ring_actors.client.state import Journal, Progress, Published
from ring_actors.config import CheckpointSection, Config
from ring_actors.delivery.inbox import Inbox
from ring_actors.delivery.outbox import NotKept, Outbox
from ring_actors.delivery.payloads import Channel, Payload, detach_to_cpu
from ring_actors.delivery.spool import Spool
from ring_actors.delivery.transport import ControlLink
from ring_actors.storage.durable import fsync_dir, moved, remove_drafts, write_atomic
from ring_actors.storage.safe_load import load_allowlisted
from ring_actors.storage.state_files import save_state


def load_client_state(path: Path, device: torch.device) -> dict[str, Any]:
    """A client checkpoint: its method and options may be a plug-in's classes too (the client
    imported their module when it built its method)."""
    return load_allowlisted(path, device, bases=(Algorithm, AlgorithmOptions))


class PushSpool:
    """The pushes a restart may need, on disk before they are acknowledged (acknowledged
    means durable: ``delivery/spool.py``) until a checkpoint has merged them. A client that
    does not checkpoint has no spool: its pushes go straight to the inbox."""

    def __init__(
        self, client_id: int, checkpoint_path: Path | None, inbox: Inbox, config: Config
    ) -> None:
        self.id = client_id
        self.spool = Spool(checkpoint_path.with_suffix(".inbox")) if checkpoint_path else None
        self.inbox = inbox
        self.config = config
        # Keeps a push from being dropped between entering the inbox and the spool.
        self.lock = threading.Lock()

    def put(self, payload: Payload) -> None:
        """Queue ``payload``, saved first if a later round may merge it: a push the spool
        cannot keep is refused whole (:class:`NotKept`: the sender sends it again), never
        merged unsaved nor acknowledged and forgotten."""
        with self.lock:
            if self._merged_later(payload) and not self.inbox.has(payload):
                try:
                    self.spool.keep(payload)
                except OSError as err:  # a full disk, say: it may have room on the next try
                    raise NotKept(f"client {self.id} could not save it: {err}") from err
            self.inbox.put(payload)

    def _merged_later(self, payload: Payload) -> bool:
        """A push a restart may need, so the spool keeps it: one a round of this client may
        still merge. In sync mode round r merges only round r - 1's pushes, so the final
        round's are merged by no round (nothing merges after the last); in async mode any
        round takes any push, the final round's included."""
        if self.spool is None or payload.channel != Channel.SHARE:
            return False
        schedule, rounds = self.config.schedule, self.config.experiment.rounds
        return schedule.mode != "sync" or payload.round < rounds - 1

    def forget_after(self, rounds: Mapping[int, int]) -> None:
        """Drop the pushes each sender of ``rounds`` sent after its round there, queued and
        kept: a resumed run restarts it from that round, so it sends them again."""
        dropped = self.inbox.forget_after(Channel.SHARE, rounds)
        if self.spool is not None:
            self.spool.discard(self.spool.names_of(p.key for p in dropped))

    def merged(self) -> set[str]:
        """The kept pushes a checkpoint taken now covers (merged: no longer in the inbox),
        to delete once it is on disk; one kept after this call is never among them."""
        if self.spool is None:
            return set()
        with self.lock:
            unmerged = self.spool.names_of(p.key for p in self.inbox.peek(_is_share))
            return self.spool.names() - unmerged

    def discard(self, names: set[str]) -> None:
        """Drop what a checkpoint now on disk merged."""
        if self.spool is not None:
            self.spool.discard(names)

    def restore(self, device: torch.device, merged: set[str]) -> None:
        """Queue again what was acknowledged before a crash, but for the pushes ``merged``
        (those the restored checkpoint took: the spool keeps them for the one before)."""
        assert self.spool is not None
        for payload in self.spool.load(device):
            if not self.spool.names_of((payload.key,)) & merged:
                self.inbox.put(payload)


class CheckpointHost(Protocol):
    """The method a checkpoint saves and a restore replaces."""

    algorithm: Algorithm


@dataclass(eq=False)
class Checkpointing:
    """A client's own checkpoint after the rounds its policy names, and its restore after
    a restart. The round takes a snapshot; a writer thread puts it on disk.

    The checkpoint before the newest stays on disk too, so that a resumed run can restore
    every member at one round (``restore_at_most``), the newest that all of them hold: the
    rounds since are redone by everyone, and no member needs a lap's total or a push that
    only a peer's newer checkpoint had. The laps' totals are kept on disk only with the
    last round's checkpoint, for the peers a finished member leaves behind."""

    id: int
    path: Path | None
    device: torch.device
    policy: CheckpointSection
    last_round: int
    progress: Progress
    published: Published
    journal: Journal
    laps: RingLaps
    outbox: Outbox
    kept: PushSpool
    control: ControlLink
    host: CheckpointHost
    lap_files: LapTotalFiles | None = field(init=False)
    writer: CheckpointWriter = field(init=False)
    saved_round: int = field(init=False, default=-1)
    saved_final: bool = field(init=False, default=False)
    # The checkpoints on disk (the writer's thread sets them), and the pushes the newest
    # one merged: retired once the checkpoint before it is replaced too.
    disk_rounds: tuple[int, ...] = field(init=False, default=())
    merged_by_newest: set[str] = field(init=False, default_factory=set)

    def __post_init__(self) -> None:
        path = self.path
        self.lap_files = LapTotalFiles(path.with_suffix(".laps")) if path else None
        background = self.policy.background
        if background == "auto":
            background = self.device.type == "cuda"
        self.writer = CheckpointWriter(f"checkpoint-{self.id}", background)
        if path is not None:  # a start after a kill: no draft of this client's stays
            remove_drafts(path.parent, of=path.name)  # a folder every client writes in
            for own_folder in (path.with_suffix(".inbox"), path.with_suffix(".laps")):
                remove_drafts(own_folder)

    def after_round(self, round_: int) -> None:
        """Save the state after ``round_`` if the policy names it."""
        if self.path is not None and self.policy.due(round_, self.last_round):
            self.save(round_)

    def joined(self, round_: int) -> None:
        """A joiner's first state, as of the round before its first: a resumed run whose
        members restart before that round restores the joiner from it."""
        if self.path is not None:
            self.save(round_)

    def finish(self, round_: int) -> None:
        """The loop is over: the newest state saved and on disk before the run's end, and no
        draft kept for a next write beside it (a run's folder may be uploaded whole)."""
        if self.path is not None:
            if round_ > self.saved_round or not self.saved_final:
                self.save(round_, final=True)
            self.writer.flush()
            self.spare.unlink(missing_ok=True)
            self.previous.unlink(missing_ok=True)  # a finished member is not rolled back
            self.disk_rounds = self.disk_rounds[-1:]
            self.kept.discard(self.merged_by_newest)
            assert self.lap_files is not None and self.kept.spool is not None
            self.lap_files.spares.clear()
            self.kept.spool.spares.clear()  # a push arriving later makes a file of its own

    @property
    def spare(self) -> Path:
        """The next checkpoint's draft: the file of the one before the previous."""
        assert self.path is not None
        return self.path.with_name(f".{self.path.name}.spare.tmp")

    @property
    def previous(self) -> Path:
        """The checkpoint the newest replaced."""
        assert self.path is not None
        return self.path.with_suffix(".previous")

    def saved_rounds(self) -> tuple[int, ...]:
        """The rounds of the checkpoints on disk, oldest first."""
        self.writer.flush()
        return self.disk_rounds

    def save(self, round_: int, final: bool = False) -> None:
        """Snapshot the private state after ``round_``, for a restarted client to resume
        from, and hand it to the writer; ``final``: the loop is over, and peers still
        behind may ask for the laps' totals."""
        path = self.path
        assert path is not None
        # A receiver keeps every push it acknowledged (its spool): a restart needs only those
        # still unacknowledged, and the newest (its acknowledgement may be on the way).
        waiting = self.outbox.unacknowledged_payloads(Channel.SHARE)
        with self.published.lock:
            last = self.published.last_push
            # What peers a round behind still ask for after a restart: pulls of what was
            # published (and, at the run's end, the laps' totals). Not ``pushed_to``: a
            # restarted client's sends are unacknowledged again, so it re-sends its pushes
            # to every out-neighbour.
            published = dict(self.published.by_round)
        older = {p.key: p for p in waiting if p is not last}  # one per push, not per target
        # A background write gets a copy of the method, which the round goes on changing (one
        # memcpy of its tensors; the rest of the state never changes once made).
        algorithm = self.host.algorithm
        if self.writer.background:
            algorithm = copy.deepcopy(algorithm)
        if last is not None:  # restored as ``last_push``
            last = sharing_storage(last, algorithm.shared_state())
        pushes = [*older.values(), *([last] if last else [])]
        lap_files = self.lap_files
        assert lap_files is not None
        spare, previous = self.spare, self.previous
        final = final or round_ >= self.last_round
        # A kept total never changes: the writer reads it later.
        totals = self.laps.kept() if final else {}
        laps = sorted(totals)
        state = {
            "round": round_,
            "first_round": self.progress.first_round,
            "algorithm": algorithm,
            "journal": self.journal.dicts(),
            "pushes": pushes,
            "published": published,
            "laps": laps,
            "torch_rng": torch.get_rng_state(),
        }
        merged = state["merged"] = self.kept.merged()

        def write() -> None:
            lap_files.keep(totals)  # only totals not on disk yet are written
            state["previous_round"] = self.disk_rounds[-1] if self.disk_rounds else None
            if moved(previous, spare):  # the one before the previous: this one's draft
                self.disk_rounds = self.disk_rounds[-1:]
            write_atomic(path, partial(save_state, state), spare=spare, replaced_to=previous)
            self.disk_rounds = (*self.disk_rounds[-1:], round_)
            lap_files.retain(laps)  # the totals no checkpoint lists any more
            # What both checkpoints on disk merged is no longer needed.
            self.kept.discard(self.merged_by_newest)
            self.merged_by_newest = merged

        self.writer.submit(write)
        self.saved_round, self.saved_final = round_, final

    def roll_back(self, at_most: int, restarts: Mapping[int, int]) -> int:
        """Back to the checkpoint before the newest if the newest is of a round after
        ``at_most``, and without the pushes peers sent after the round each ``restarts``
        from: they redo those rounds and send them again. The round restored."""
        if self.progress.completed > at_most:
            self.load(at_most)
        self.kept.forget_after(restarts)
        return self.progress.completed

    def load(self, restore_at_most: int | None = None) -> int | None:
        """Restore the last checkpoint (or the one before, when the last is of a round past
        ``restore_at_most``) and re-send the reports a crash may have cut off; its round,
        or None when there is none (a restart on a new node)."""
        path = self.path
        if path is None or not path.exists():
            return None
        saved = load_client_state(path, self.device)
        past = restore_at_most is not None and saved["round"] > restore_at_most
        if past and moved(self.previous, path):  # the newer one is of rounds to be redone
            fsync_dir(path.parent)
            saved = load_client_state(path, self.device)
            saved["previous_round"] = None
        previous = saved.get("previous_round")
        has_previous = previous is not None and self.previous.exists()
        self.disk_rounds = (previous, saved["round"]) if has_previous else (saved["round"],)
        self.merged_by_newest = set()
        self.saved_round, self.saved_final = saved["round"], False
        self.host.algorithm = saved["algorithm"]
        self.progress.completed = saved["round"]
        self.progress.first_round = saved["first_round"]
        entries = self.journal.restore(saved["journal"])
        published = self.published
        hand_off = detach_to_cpu(self.host.algorithm.hand_off_state())
        *recent, last = saved["pushes"] or [None]
        with published.lock:
            published.recent_pushes = recent
            published.last_push = last if last is None else own_copies(last)
            published.by_round = saved["published"]
            # A joiner's donor hands the state it resumed, not the one it was built with.
            published.hand_off, published.hand_off_round = hand_off, saved["round"]
        assert self.lap_files is not None
        self.laps.restore(self.lap_files.load(saved["laps"], self.device))
        torch.set_rng_state(saved["torch_rng"])
        self.kept.restore(self.device, saved.get("merged", set()))  # acknowledged before the crash
        for entry in entries:
            if entry.kind == "round":
                self.control.report_round(self.id, entry.round, entry.metrics)
        return saved["round"]


def sharing_storage(push: Payload, model: dict[str, torch.Tensor]) -> Payload:
    """``push`` with each tensor equal to the method's own of its name (values, type and
    device) replaced by the method's, so a checkpoint writes those bytes once: ``torch.save``
    writes each storage once, and a push after training is most of the model again (a
    quarter of a ``dfedavg`` checkpoint). A load gives it :func:`own_copies`."""
    tensors = {
        name: model[name] if _same(tensor, model.get(name)) else tensor
        for name, tensor in push.tensors.items()
    }
    return replace(push, tensors=tensors)


def own_copies(push: Payload) -> Payload:
    """A restored push whose tensors share no storage with the restored model, which trains
    on while the push may be sent again."""
    return replace(push, tensors=detach_to_cpu(push.tensors))


def _same(tensor: torch.Tensor, other: torch.Tensor | None) -> bool:
    return (
        other is not None
        and other.device == tensor.device
        and other.dtype == tensor.dtype
        and torch.equal(other, tensor)
    )


def _is_share(payload: Payload) -> bool:
    return payload.channel == Channel.SHARE
