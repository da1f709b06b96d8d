"""A client's checkpoint, read as data and never code.

A client's private state is a torch file read with torch's weights-only loader and an allowlist
of classes (the project's own, torch's modules, a plug-in's method and model; never a function),
so a checkpoint directory on a shared filesystem is not a way into every node.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ring_actors.algorithms.base import Algorithm, AlgorithmOptions
from ring_actors.client.state import ClientState
from ring_actors.delivery.journal import JournalEntry
from ring_actors.delivery.payloads import Channel, Payload
from ring_actors.storage.durable import write_atomic
from ring_actors.storage.safe_load import load_allowlisted


def load_client_state(path: Path, device: torch.device) -> dict[str, Any]:
    """A client checkpoint: its method and options may be a plug-in's classes too (the client
    imported their module when it built its method)."""
    return load_allowlisted(path, device, bases=(Algorithm, AlgorithmOptions))


class Checkpointing(ClientState):
    """A client's own checkpoint after each round, and its restore after a restart; mixed
    into :class:`~ring_actors.client.core.ClientCore`."""

    def save_checkpoint(self, round_: int) -> None:
        """The private state after ``round_``, for a restarted client to resume from."""
        path = self.checkpoint_path
        assert path is not None
        # A receiver keeps every push it acknowledged (its spool): a restart needs only those
        # still unacknowledged, and the newest (its acknowledgement may be on the way).
        waiting = self.outbox.unacknowledged_payloads(Channel.SHARE)
        with self.lock:
            last = self.last_push
            # What peers a round behind still ask for after a restart: pulls of what was
            # published, and the laps' totals. Not ``pushed_to``: a restarted client's sends
            # are unacknowledged again, so it re-sends its pushes to every out-neighbour.
            published = dict(self.published)
        older = {p.key: p for p in waiting if p is not last}  # one per push, not per target
        pushes = [*older.values(), *([last] if last else [])]  # restored as ``last_push``
        state = {
            "round": round_,
            "first_round": self.first_round,
            "algorithm": self.algorithm,
            "journal": self.journal(),
            "pushes": pushes,
            "published": published,
            "laps": self.laps.kept(),
            "torch_rng": torch.get_rng_state(),
        }
        write_atomic(path, lambda file: torch.save(state, file))
        if self.spool is not None:  # what this checkpoint merged is no longer needed
            with self.spool_lock:
                self.spool.retain(p.key for p in self.inbox.peek(_is_share))

    def load_checkpoint(self) -> int | None:
        """Restore the last checkpoint and re-send the reports a crash may have cut off;
        its round, or None when there is none (a restart on a new node)."""
        path = self.checkpoint_path
        if path is None or not path.exists():
            return None
        saved = load_client_state(path, self.device)
        self.algorithm = saved["algorithm"]
        self.completed = saved["round"]
        self.first_round = saved["first_round"]
        self.journal_entries = [JournalEntry.from_dict(e) for e in saved["journal"]]
        *self.recent_pushes, self.last_push = saved["pushes"] or [None]
        self.published = saved["published"]
        self.laps.restore(saved["laps"])
        torch.set_rng_state(saved["torch_rng"])
        assert self.spool is not None
        for payload in self.spool.load(self.device):  # acknowledged before the crash
            self.inbox.put(payload)
        for entry in self.journal_entries:
            if entry.kind == "round":
                self.control.report_round(self.id, entry.round, entry.metrics)
        return saved["round"]


def _is_share(payload: Payload) -> bool:
    return payload.channel == Channel.SHARE
