"""Start client actors in waves the node can take, and ride out what Ray reports on the way.

Started all at once, 50 actor processes on a 2-core node each import torch at the same time:
memory fills, Ray warns of many times its expected start-up concurrency, and one client Ray
reports as temporarily unavailable ended the whole launch. Here at most ``width`` constructions
are in flight (the cluster's cores: Ray starts about one worker process per core at a time),
a new one starts only while the node has memory for it, each attempt has a deadline
(``timeouts.LaunchTimeouts``), and a failed attempt is tried again. A client that still cannot
be built is reported by name; ``clients.on_launch_failure`` decides whether the ring forms
without it or the launch stops. A constructor that raises the same error twice is not tried a
third time: it is the client's own code failing, which a new process only repeats.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import ray
from ray.exceptions import ActorUnavailableError, RayError

from ring_actors.runtime.placement import Placement
from ring_actors.timeouts import LaunchTimeouts

log = logging.getLogger(__name__)

START_ATTEMPTS = 3  # tries per client: a node under pressure fails a start now and then


class LaunchError(RuntimeError):
    """The launch cannot go on; the message names the clients and what to change."""


@dataclass
class _Attempt:
    client: int
    number: int  # 1 for the first try
    handle: ray.actor.ActorHandle | None = None  # kept when the same actor is asked again
    not_before: float = 0.0
    raised: str | None = None  # what the constructor of the attempt before raised


@dataclass
class Started:
    """What a launch wave produced: the clients built, and why the others were not."""

    handles: dict[int, ray.actor.ActorHandle] = field(default_factory=dict)
    facts: dict[int, Placement] = field(default_factory=dict)
    failures: dict[int, str] = field(default_factory=dict)  # client -> its last error
    timed_out: set[int] = field(default_factory=set)  # failures whose attempt ran out of time


def start_width(cores: float) -> int:
    """Constructions in flight at once: one per core, at least one."""
    return max(1, int(cores))


def start_clients(
    ids: Iterable[int],
    build: Callable[[int], ray.actor.ActorHandle],
    timeouts: LaunchTimeouts,
    width: int,
    room: Callable[[], bool] = lambda: True,
    attempts: int = START_ATTEMPTS,
) -> Started:
    """Build every client in ``ids`` with ``build``; ``describe`` on each confirms it.

    ``room()`` says whether the node has memory for one more start (asked only while another
    is in flight, so the launch always moves). An actor Ray reports as unavailable is asked
    again; one that died (its constructor raised, or its process was killed) is built anew.
    An attempt past its deadline is not retried: what kept it from being placed stays.
    """
    queue = deque(_Attempt(i, 1) for i in ids)
    flying: dict[ray.ObjectRef, tuple[_Attempt, ray.actor.ActorHandle, float]] = {}
    out = Started()

    def retry(
        attempt: _Attempt, error: str, handle: ray.actor.ActorHandle | None, raised: bool = False
    ) -> None:
        if attempt.number >= attempts or (raised and error == attempt.raised):
            out.failures[attempt.client] = f"{error} (attempt {attempt.number} of {attempts})"
            if handle is not None:
                ray.kill(handle)
            return
        log.warning(
            "client %d: start attempt %d of %d failed (%s); trying again",
            attempt.client,
            attempt.number,
            attempts,
            error,
        )
        pause = time.monotonic() + timeouts.retry_pause_s
        again = _Attempt(
            attempt.client, attempt.number + 1, handle, pause, error if raised else None
        )
        queue.append(again)

    while queue or flying:
        now = time.monotonic()
        while queue and len(flying) < width and queue[0].not_before <= now:
            if flying and not room():
                break
            attempt = queue.popleft()
            handle = attempt.handle
            if handle is None:
                try:
                    handle = build(attempt.client)
                except ValueError as err:  # the dead attempt's name is not free yet
                    retry(attempt, str(err), None)
                    continue
            flying[handle.describe.remote()] = (attempt, handle, now)
        if not flying:
            time.sleep(max(0.0, min(a.not_before for a in queue) - now) if queue else 0.0)
            continue
        ready, _ = ray.wait(list(flying), num_returns=1, timeout=timeouts.poll_s)
        for ref in ready:
            attempt, handle, _ = flying.pop(ref)
            try:
                facts = ray.get(ref)
            except ActorUnavailableError as err:  # alive but unreachable for now: ask again
                retry(attempt, _short(err), handle)
            except RayError as err:  # died in its constructor, or its process was killed
                ray.kill(handle)
                retry(attempt, _short(err), None, getattr(err, "actor_init_failed", False))
            else:
                out.handles[attempt.client] = handle
                out.facts[attempt.client] = facts
        now = time.monotonic()
        for ref, (attempt, handle, began) in list(flying.items()):
            if now - began > timeouts.construct_s:
                del flying[ref]
                ray.kill(handle)
                out.failures[attempt.client] = (
                    f"not placed and constructed within {timeouts.construct_s:g} s"
                )
                out.timed_out.add(attempt.client)
    return out


def _short(err: Exception) -> str:
    """The last line of what Ray reports: the constructor's own exception, when it raised."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return f"{type(err).__name__}: {lines[-1]}" if lines else type(err).__name__


def settle(started: Started, initial: set[int], policy: str, resume: bool) -> set[int]:
    """Apply ``clients.on_launch_failure``; returns the clients dropped (none under ``stop``).

    ``drop`` leaves out clients of the starting ring; the ring still needs two. A standby
    client (a joiner's or ``clients.reserve``'s) and any client of a resumed run (its
    checkpoint expects every member back) stop the launch whatever the policy.
    """
    failed = set(started.failures)
    if not failed:
        return set()
    named = "; ".join(f"client {c}: {started.failures[c]}" for c in sorted(failed))
    left = len(initial - failed)
    if policy == "drop" and not resume and failed <= initial and left >= 2:
        log.warning("dropped before round 0 (clients.on_launch_failure=drop): %s", named)
        return failed
    why = (
        "a resumed run needs every member back"
        if resume
        else "standby clients (joiners, clients.reserve) cannot be dropped"
        if not failed <= initial
        else f"only {left} clients would be left, and a ring needs two"
        if policy == "drop"
        else "clients.on_launch_failure=stop; set it to drop to run without them"
    )
    raise LaunchError(
        f"{len(failed)} client(s) could not be started ({named}); the launch stops: {why}. "
        "A start that fails every time is most often "
        "a method, backbone or dataset of one's own raising in every client: check "
        "algorithm.name, algorithm.backbone, data.dataset and their options."
    )
