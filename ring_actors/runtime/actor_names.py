"""What outlives a process: actor names, so a restarted actor finds its peers again."""

from __future__ import annotations


def actor_name(run_key: str, role: str) -> str:
    """The Ray name of one actor of one run (``coordinator`` or ``client-<id>``)."""
    return f"ring-actors-{run_key}-{role}"


def run_namespace(run_key: str) -> str:
    """The run's own namespace in Ray's key-value store: runs on one cluster never meet."""
    return f"ring-actors-{run_key}"
