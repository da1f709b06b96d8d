"""The laps' totals a finished client's checkpoint keeps, one file each.

A resumed run restores every live member at one round (``checkpoint.py``), so the rounds
redone are redone by all and each lap is summed again; but a member that finished the run is
not resumed, and peers still behind it ask it for the totals of the laps they redo. So the
last round's checkpoint writes the totals a client still keeps, each to a file of its own,
and retires those it no longer lists (``SpareFiles``: its file is a later total's draft).
"""

from __future__ import annotations

from collections.abc import Collection
from functools import partial
from pathlib import Path
from urllib.parse import quote

import torch

from ring_actors.client.lap_host import LapResult
from ring_actors.storage.durable import write_atomic
from ring_actors.storage.safe_load import load_allowlisted
from ring_actors.storage.spare_files import SpareFiles
from ring_actors.storage.state_files import save_state

LapKey = tuple[str, int]  # a lap's name and round


class LapTotalFiles:
    """One file per kept total in ``directory``, each written atomically."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.written: dict[LapKey, LapResult] = {}  # what is on disk, by the object written
        self.spares = SpareFiles(directory, most=8)

    def keep(self, results: dict[LapKey, LapResult]) -> None:
        """Write each result not on disk yet."""
        for key, result in results.items():
            if self.written.get(key) is not result:
                write = partial(save_state, result)
                write_atomic(self._path(key), write, spare=self.spares.take())
                self.written[key] = result

    def retain(self, keys: Collection[LapKey]) -> None:
        """Retire the totals the checkpoint just written no longer lists."""
        names = {self._path(key).name for key in keys}
        for path in self.directory.glob("*.pt"):  # none while the folder is yet to be
            if path.name not in names:
                self.spares.retire(path)
        self.written = {key: r for key, r in self.written.items() if key in keys}

    def load(self, keys: Collection[LapKey], device: torch.device) -> dict[LapKey, LapResult]:
        """The totals a checkpoint lists."""
        results = {key: load_allowlisted(self._path(key), device) for key in keys}
        self.written = dict(results)
        return results

    def _path(self, key: LapKey) -> Path:
        name, round_ = key
        return self.directory / f"{quote(name, safe='')}-{round_}.pt"
