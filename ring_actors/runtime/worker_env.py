"""Process settings for the many long-lived actor processes that share one node.

glibc gives every thread that allocates its own malloc arena and keeps freed memory in it; a
client runs Ray's RPC threads, its training thread and torch's pools, so without limits each
client process keeps hundreds of MB of freed memory. One arena bounds that at no cost in speed,
and it must be one: a thread's own arena grows in 64 MiB heaps, and glibc (2.36) unmaps a heap
that falls free whatever the trim threshold below says, so a training thread that drew the
second of two arenas faulted its working memory in every step.

Within a training step the opposite holds: glibc's default thresholds move with the sizes it
sees and hand a step's freed activations back to the system before the next step asks for them
again, so every step faults its working memory in anew (about 3,000 page faults a step of the
CNN, a tenth of its training time). Fixed thresholds keep that memory while a client computes,
and the client hands it back itself each time it gives up its compute slot
(:func:`release_freed_memory`): only the clients that hold slots need their working memory.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from pathlib import Path
from typing import Any

ALLOCATOR_ENV = {
    "MALLOC_ARENA_MAX": "1",
    # glibc's largest: blocks up to 32 MiB come from the arenas, and are reused step to step.
    "MALLOC_MMAP_THRESHOLD_": str(32 * 2**20),
    # Never trimmed during compute; release_freed_memory() trims when the slot is given back.
    "MALLOC_TRIM_THRESHOLD_": str(2**30),
}


def actor_runtime_env() -> dict[str, dict[str, str]]:
    """The ``runtime_env`` of every actor a run starts (merged with the job's own)."""
    return {"env_vars": dict(ALLOCATOR_ENV)}


def job_runtime_env(py_modules: tuple[str, ...]) -> dict[str, Any]:
    """The driver's ``runtime_env``: the user's own modules, shipped to every worker."""
    return {"py_modules": [str(Path(m).resolve()) for m in py_modules]} if py_modules else {}


def _libc_trim():
    name = ctypes.util.find_library("c")
    return getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None


_MALLOC_TRIM = _libc_trim()


def release_freed_memory() -> None:
    """Return the allocator's free pages to the system (glibc only; elsewhere a no-op)."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


def loaded_modules() -> list[str]:
    """The modules this process has imported: what an actor's memory pays for (the control
    plane's actors import no torch)."""
    return sorted(sys.modules)
