"""What outlives a process: actor names to find peers again, and atomic checkpoint files."""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any


def actor_name(run_key: str, role: str) -> str:
    """The Ray name of one actor of one run (``coordinator`` or ``client-<id>``)."""
    return f"ring-actors-{run_key}-{role}"


def save_atomic(path: Path, state: Any) -> None:
    """Pickle ``state`` to ``path`` so that a reader sees the old file or the new, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "wb") as handle:
        pickle.dump(state, handle, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, path)


def load(path: Path) -> Any | None:
    """The last saved state, or None when there is none."""
    if not path.exists():
        return None
    with open(path, "rb") as handle:
        return pickle.load(handle)
