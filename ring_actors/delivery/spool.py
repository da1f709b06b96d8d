"""Acknowledged means durable: a checkpointing client's unmerged pushes, kept on disk.

A sender forgets a push once its receiver acknowledges it, so a receiver that crashes after
acknowledging a push but before checkpointing the round that merged it would resume from
its older checkpoint needing a push nobody holds any more: the ring then waits out a
timeout and the run silently diverges from one never interrupted. A checkpointing client
therefore writes each push here before acknowledging it and drops it only once a checkpoint
no longer needs it.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import torch

from ring_actors.delivery.payloads import Channel, Payload
from ring_actors.storage.durable import write_atomic
from ring_actors.storage.safe_load import load_allowlisted
from ring_actors.storage.state_files import save_state

PayloadKey = tuple[int, int, int, str, str]


class Spool:
    """One file per payload in ``directory``, written atomically."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def keep(self, payload: Payload) -> None:
        """Write ``payload``; a reader later sees all of it or none of it."""
        write_atomic(self._path(payload.key), lambda file: save_state(payload, file))

    def names(self) -> set[str]:
        """The files of every kept payload."""
        if not self.directory.exists():
            return set()
        return {p.name for p in self.directory.glob("*.pt")}

    def names_of(self, keys: Iterable[PayloadKey]) -> set[str]:
        """The files the payloads with ``keys`` are kept in."""
        return {self._path(key).name for key in keys}

    def discard(self, names: Iterable[str]) -> None:
        """Delete the kept payloads in files ``names``: merged and covered by a checkpoint."""
        for name in names:
            (self.directory / name).unlink(missing_ok=True)

    def load(self, device: torch.device) -> list[Payload]:
        """Every kept payload, oldest round first."""
        if not self.directory.exists():
            return []
        payloads = [load_allowlisted(p, device) for p in self.directory.glob("*.pt")]
        return sorted(payloads, key=lambda p: (p.round, p.sender, p.seq))

    def _path(self, key: PayloadKey) -> Path:
        sender, round_, seq, channel, lap = key
        return self.directory / f"{Channel(channel).value}-{lap}-{sender}-{round_}-{seq}.pt"
