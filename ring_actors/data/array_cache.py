"""Decoded datasets cached as .npz beside the archives they came from, so a second run (and
every client actor) skips decoding; a stale or unreadable cache is ignored, never trusted."""

from __future__ import annotations

import hashlib
import os
import tempfile
import warnings
import zipfile
from pathlib import Path

import numpy as np

from ring_actors.data.formats import Splits

# Bumped whenever the decoders change, so stale .npz caches are ignored.
_CACHE_FORMAT = 1


def cache_path(base: Path, name: str, paths: list[Path]) -> Path:
    """Cache file keyed by the dataset and each source file's path, size and mtime."""
    key = hashlib.sha256(f"{_CACHE_FORMAT}|{name}".encode())
    for p in paths:
        st = p.stat()
        key.update(f"|{p.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode())
    return base / "extracted" / f"{name}-{key.hexdigest()[:16]}.npz"


_ARRAY_KEYS = ("train_x", "train_y", "test_x", "test_y")


def read_cache(path: Path) -> Splits | None:
    try:
        with np.load(path) as z:
            return tuple(z[k] for k in _ARRAY_KEYS)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:
        warnings.warn(f"ignoring unreadable dataset cache {path}: {e}", stacklevel=3)
        return None


def write_cache(path: Path, arrays: Splits) -> None:
    """Write tmp then rename, so concurrent loaders never see a partial file."""
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}-", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **dict(zip(_ARRAY_KEYS, arrays, strict=True)))
        os.chmod(tmp, 0o644)  # mkstemp makes it owner-only; a cache may be shared
        os.replace(tmp, path)
    except OSError as e:
        warnings.warn(f"could not cache dataset arrays at {path}: {e}", stacklevel=3)
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
