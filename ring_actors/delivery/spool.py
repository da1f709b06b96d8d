"""Acknowledged means durable: a checkpointing client's unmerged pushes, kept on disk.

A sender forgets a push once its receiver acknowledges it, so a receiver that crashes after
acknowledging a push but before checkpointing the round that merged it would resume from
its older checkpoint needing a push nobody holds any more: the ring then waits out a
timeout and the run silently diverges from one never interrupted. A checkpointing client
therefore writes each push here before acknowledging it and drops it only once a checkpoint
no longer needs it.

Written means whole in the operating system's cache: a client process that crashes, however
it crashes, finds the push again. Putting it on disk (fsync) is left to a thread of the
spool's own, which syncs every push written since its last pass in one go. On the
acknowledgement's path the fsync was most of a hop's time on a disk that writes 300-500 MB/s
(106 of 158 ms for a 43 MiB push); a machine that stops within one such pass of a push loses
that push, as it loses its clients' processes. A push dropped (a checkpoint covers it) is
the next one's draft (``spare_files.py``); each carries its checksums, and a file whose bytes
are not all its own push's is refused as torn.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from functools import partial
from pathlib import Path

import torch

from ring_actors.delivery.payloads import Channel, Payload
from ring_actors.storage.durable import fsync_dir, fsync_file, write_atomic
from ring_actors.storage.run_folder import CheckpointError
from ring_actors.storage.safe_load import load_allowlisted
from ring_actors.storage.spare_files import SpareFiles
from ring_actors.storage.state_files import is_whole, save_checked

log = logging.getLogger(__name__)

PayloadKey = tuple[int, int, int, str, str]


class Spool:
    """One file per payload in ``directory``, written atomically, synced to disk in groups."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.lock = threading.Lock()
        self.unsynced: set[Path] = set()
        self.written = threading.Event()  # wakes the syncer
        self.syncer: threading.Thread | None = None
        self.spares = SpareFiles(directory, most=8)

    def keep(self, payload: Payload) -> None:
        """Write ``payload``; a reader later sees all of it or none of it. On disk at the
        syncer's next pass."""
        path = self._path(payload.key)
        write = partial(save_checked, payload)
        write_atomic(path, write, durable=False, spare=self.spares.take())
        with self.lock:
            self.unsynced.add(path)
            if self.syncer is None:
                self.syncer = threading.Thread(target=self._sync_forever, daemon=True)
                self.syncer.name = f"spool-sync-{self.directory.name}"
                self.syncer.start()
        self.written.set()

    def sync(self) -> int:
        """Put every push written so far on disk, and their names in the folder; the number
        of files synced (those discarded meanwhile are skipped)."""
        with self.lock:
            paths, self.unsynced = self.unsynced, set()
        try:
            synced = sum(fsync_file(path) for path in sorted(paths))
        except OSError:
            with self.lock:
                self.unsynced |= paths  # tried again at the next pass
            raise
        if paths:
            fsync_dir(self.directory)
        return synced

    def _sync_forever(self) -> None:
        while True:
            self.written.wait()
            self.written.clear()
            try:
                self.sync()
            except OSError as err:  # a full or failing disk: the next push tries again
                log.warning("spool %s: sync failed: %s", self.directory, err)

    def names(self) -> set[str]:
        """The files of every kept payload."""
        if not self.directory.exists():
            return set()
        return {p.name for p in self.directory.glob("*.pt")}

    def names_of(self, keys: Iterable[PayloadKey]) -> set[str]:
        """The files the payloads with ``keys`` are kept in."""
        return {self._path(key).name for key in keys}

    def discard(self, names: Iterable[str]) -> None:
        """Retire the kept payloads in files ``names``: merged and covered by a checkpoint."""
        for name in names:
            self.spares.retire(self.directory / name)

    def load(self, device: torch.device) -> list[Payload]:
        """Every kept payload, oldest round first."""
        if not self.directory.exists():
            return []
        payloads = []
        for path in self.directory.glob("*.pt"):
            try:
                if not is_whole(path):
                    raise ValueError("bytes that are not all its own")
                payload = load_allowlisted(path, device)
                if self._path(payload.key) != path:
                    raise ValueError(f"an older push's bytes ({payload.key})")
                payloads.append(payload)
            except CheckpointError:  # names what no state file holds: refused, loudly
                raise
            except (ValueError, RuntimeError, EOFError) as err:  # torn: stopped before a sync
                log.warning("spool: %s is unreadable, a push lost (%s)", path.name, err)
        return sorted(payloads, key=lambda p: (p.round, p.sender, p.seq))

    def _path(self, key: PayloadKey) -> Path:
        sender, round_, seq, channel, lap = key
        return self.directory / f"{Channel(channel).value}-{lap}-{sender}-{round_}-{seq}.pt"
