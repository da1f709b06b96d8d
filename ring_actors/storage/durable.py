"""Files that survive a kill: every file the system reads back is written whole or not at all.

A reader sees the old file or the new one, never half of one, even when the writer is killed
mid-write or the machine loses power: the bytes go to a temporary file in the same folder,
are fsynced, the file is renamed over the old one, and the folder is fsynced so the rename
itself is on disk.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


def write_atomic(
    path: Path,
    content: bytes | str | Callable[[BinaryIO], None],
    durable: bool = True,
    spare: Path | None = None,
    replaced_to: Path | None = None,
) -> None:
    """Replace ``path`` with ``content`` (bytes, text as UTF-8, or a function that writes to
    the open binary file) atomically and, unless ``durable`` is False, durably. Without it the
    file is whole for every reader once this returns, a killed writer's included, and on
    disk only once :func:`fsync_file` and :func:`fsync_dir` have run: a machine that stops
    first may lose it (its name may then hold a torn file).

    ``spare``: a file of the writer's whose content is no longer needed, written over rather
    than a new file, whose pages cost this project's 2-core machine five times the CPU (25
    against 5 ms for 8 MiB). A write not ``durable`` over a spare may hold the spare's old bytes
    after a power cut: its reader must tell them apart (``state_files.is_whole``).
    ``replaced_to``: a draft's name (a start removes drafts) the version this write replaces
    keeps, a later write's spare."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # Unique per writer: two threads or processes writing one path never share a draft.
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")
    mode = "wb"
    if spare is not None and moved(spare, tmp):
        mode = "r+b"  # no truncation on open: its pages are overwritten, its tail cut after
    try:
        with open(tmp, mode) as file:
            if callable(content):
                content(file)
            else:
                file.write(content.encode() if isinstance(content, str) else content)
            file.truncate()
            file.flush()
            if durable:
                os.fsync(file.fileno())
        if replaced_to is not None:
            _link(path, replaced_to)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        if replaced_to is not None:
            replaced_to.unlink(missing_ok=True)  # never left a second name of the live file
        raise
    if durable:
        fsync_dir(path.parent)


def moved(source: Path, target: Path) -> bool:
    """Rename ``source`` over ``target``; False if there was no ``source``."""
    try:
        os.replace(source, target)
    except FileNotFoundError:
        return False
    return True


def _link(path: Path, name: Path) -> None:
    """A second name for ``path``, if it exists and the file system allows it."""
    with contextlib.suppress(OSError):  # no file yet, or no hard links: a new file next time
        os.link(path, name)


def remove_drafts(directory: Path, of: str = "") -> None:
    """Delete the drafts a writer killed mid-write left in ``directory``: of the files named
    ``of`` only (a folder other writers share), or every one (a folder of one writer's)."""
    if directory.is_dir():
        for draft in directory.glob(f".{of}.*.tmp" if of else ".*.tmp"):
            draft.unlink(missing_ok=True)


def fsync_file(path: Path) -> bool:
    """Put ``path``'s bytes on disk; False if it is gone (deleted meanwhile)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return True


def fsync_dir(directory: Path) -> None:
    """Make a rename or a deletion in ``directory`` durable (where the OS allows it)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # a platform that cannot open folders: the rename is atomic still
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
