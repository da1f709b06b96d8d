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
import os
import sys
from pathlib import Path
from typing import Any

import ray

ALLOCATOR_ENV = {
    "MALLOC_ARENA_MAX": "1",
    # glibc's largest: blocks up to 32 MiB come from the arenas, and are reused step to step.
    "MALLOC_MMAP_THRESHOLD_": str(32 * 2**20),
    # Never trimmed during compute; release_freed_memory() trims when the slot is given back.
    "MALLOC_TRIM_THRESHOLD_": str(2**30),
}


# The GCS address of the Ray this process started with ALLOCATOR_ENV in its environment.
_INHERITED_BY: str | None = None


def start_local_ray(**init_args: Any) -> None:
    """``ray.init`` a Ray of this machine whose processes inherit ALLOCATOR_ENV.

    Its actors then need no ``runtime_env``: an actor with one starts in a worker of its own
    through Ray's setup process (it imports Ray twice: 0.7 core-s and half a second more per
    actor), while one without takes a worker Ray started ahead.
    """
    global _INHERITED_BY
    before = {key: os.environ.get(key) for key in ALLOCATOR_ENV}
    os.environ.update(ALLOCATOR_ENV)  # glibc reads them as a process starts: not this one
    try:
        ray.init(**init_args)
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key)
            else:
                os.environ[key] = value
    _INHERITED_BY = ray.get_runtime_context().gcs_address


def actor_runtime_env() -> dict[str, dict[str, str]]:
    """The ``runtime_env`` of every actor a run starts (merged with the job's own): none on
    a Ray whose processes inherit the settings (:func:`start_local_ray`)."""
    if ray.is_initialized() and ray.get_runtime_context().gcs_address == _INHERITED_BY:
        return {}
    return {"env_vars": dict(ALLOCATOR_ENV)}


def actor_options() -> dict[str, Any]:
    """Ray options of every actor a run starts. Ray would record each call as task events for
    its dashboard's task table, sent to the GCS: a run's control calls (a ping a second per
    client, slot renewals, pushes) cost every process and the GCS their share, and the run's
    own events and tables already say what happened."""
    return {"runtime_env": actor_runtime_env(), "enable_task_events": False}


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
