"""Stop actors and return only once their processes are gone.

``ray.kill`` returns before the actor dies, and Ray's notice that it died (a call to it fails)
comes 10-20 ms before its process ends: a coordinator killed that way can still save its
record into a run folder a failed launch has just removed. So this waits for the notice, then
for the process itself where it runs on this node. Ray tells an actor's process only through
its actor table (``ray._private.state``; the public state API needs the dashboard): a Ray
without it leaves the wait at the notice.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable

import ray
from ray.exceptions import GetTimeoutError, RayActorError

POLL_S = 0.02


def stop_actors(handles: Iterable[ray.actor.ActorHandle], wait_s: float = 0.0) -> None:
    """Kill each actor; with ``wait_s``, wait up to that long for every one to be gone."""
    handles = list(handles)
    pids = [_local_pid(handle) for handle in handles] if wait_s else []
    for handle in handles:
        ray.kill(handle)
    if not wait_s:
        return
    deadline = time.monotonic() + wait_s
    for handle in handles:
        while time.monotonic() < deadline and not _dead(handle):
            time.sleep(POLL_S)
    for pid in filter(None, pids):
        while time.monotonic() < deadline and _running(pid):
            time.sleep(POLL_S)


def _dead(handle: ray.actor.ActorHandle) -> bool:
    """True once a call to the actor fails because it died."""
    try:
        ray.get(handle.__ray_ready__.remote(), timeout=POLL_S)
    except RayActorError:
        return True
    except GetTimeoutError:
        return False
    return False


def _local_pid(handle: ray.actor.ActorHandle) -> int | None:
    """The actor's process id if it has one on this node (not for one still being placed)."""
    try:
        from ray._private import state

        entry = state.actors(handle._actor_id.hex())
        here = ray.get_runtime_context().get_node_id()
        pid = int(entry.get("Pid") or 0)
        return pid if pid and entry["Address"]["NodeID"] == here else None
    except Exception:  # a Ray whose actor table reads otherwise: the notice alone is waited
        return None


def _running(pid: int) -> bool:
    """A process that exists and is not a zombie waiting to be reaped."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:  # no /proc on this platform
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # another user's process by that id: it exists
            return True
        return True
