"""The state every part of the coordinator reads: declared once for the parts mixed into
:class:`~ring_actors.coordinator.core.CoordinatorCore`, which sets it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from ring_actors.config import Config
from ring_actors.coordinator.health import Health
from ring_actors.coordinator.membership import MembershipTable
from ring_actors.coordinator.results import Results
from ring_actors.coordinator.tracking import Tracker
from ring_actors.delivery.transport import ClientHandle
from ring_actors.timeouts import Timeouts


class CoordinatorState:
    """What :class:`CoordinatorCore` holds; its parts act on it under ``lock``."""

    config: Config
    timeouts: Timeouts
    output_dir: Path
    checkpoint_path: Path
    tracker: Tracker
    table: MembershipTable
    handles: dict[int, ClientHandle]
    find_client: Callable[[int], ClientHandle | None]  # a client's handle, found by name
    lock: threading.RLock
    results: Results
    health: Health
    stop_reason: str | None
