"""Process settings for the many long-lived actor processes that share one node.

glibc gives every thread that allocates its own malloc arena and keeps freed memory in it; a
client runs Ray's RPC threads, its training thread and torch's pools, so without limits each
client process grows by hundreds of MB of freed but unreturned memory. Two arenas, and large
blocks mapped and returned to the system at once, keep a client near what it really holds.
"""

from __future__ import annotations

ALLOCATOR_ENV = {
    "MALLOC_ARENA_MAX": "2",
    "MALLOC_MMAP_THRESHOLD_": "65536",
    "MALLOC_TRIM_THRESHOLD_": "131072",
}


def actor_runtime_env() -> dict[str, dict[str, str]]:
    """The ``runtime_env`` of every actor a run starts (merged with the job's own)."""
    return {"env_vars": dict(ALLOCATOR_ENV)}
