"""Files whose content is no longer needed, kept as drafts for the next writes.

A client writes model-sized files every round or few (each acknowledged push, each lap's total)
and deletes them once a checkpoint no longer needs them. Writing into a new file costs far more
CPU than its bytes: on this project's 2-core machine 25 ms for 8 MiB, against 5 ms over a file's
pages written before. So a deleted file is renamed to a draft instead, and the next write goes
over it (``write_atomic``'s ``spare``); a start removes drafts left by a kill.
"""

from __future__ import annotations

import itertools
import os
import threading
from pathlib import Path


class SpareFiles:
    """Up to ``most`` files of ``directory`` kept for the next writes; the rest deleted."""

    def __init__(self, directory: Path, most: int) -> None:
        self.directory, self.most = directory, most
        self.lock = threading.Lock()
        self.spares: list[Path] = []
        self.names = itertools.count()

    def retire(self, path: Path) -> None:
        """``path`` is no longer needed: a spare, or deleted when enough are kept."""
        with self.lock:
            if len(self.spares) < self.most:
                spare = self.directory / f".spare-{next(self.names)}.tmp"
                try:
                    os.replace(path, spare)
                except FileNotFoundError:
                    return
                self.spares.append(spare)
                return
        path.unlink(missing_ok=True)

    def take(self) -> Path | None:
        """A spare to write over, or None."""
        with self.lock:
            return self.spares.pop() if self.spares else None

    def clear(self) -> None:
        """Delete every spare: no write is to come."""
        with self.lock:
            spares, self.spares = self.spares, []
        for spare in spares:
            spare.unlink(missing_ok=True)
