"""The state every part of a client reads: declared once for the parts mixed into
:class:`~ring_actors.client.core.ClientCore`, which sets it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # names only: the spool imports the checkpoint, which builds on this
    import torch

    from ring_actors.algorithms import Algorithm
    from ring_actors.client.isolation_and_noise import ExchangeControl
    from ring_actors.client.resources import ClientData
    from ring_actors.client.ring_lap import RingLaps
    from ring_actors.config import Config
    from ring_actors.delivery.inbox import Inbox
    from ring_actors.delivery.journal import JournalEntry
    from ring_actors.delivery.outbox import Outbox
    from ring_actors.delivery.payload_checks import Bounds, TensorSpec
    from ring_actors.delivery.payloads import Payload
    from ring_actors.delivery.spool import Spool
    from ring_actors.delivery.transport import ClientHandle, ControlLink, Pending
    from ring_actors.delivery.view import View
    from ring_actors.heterogeneity.model import Heterogeneity
    from ring_actors.timeouts import Timeouts
    from topologies import Topology


class ClientState:
    """What :class:`ClientCore` holds; its parts read and change it under ``lock``."""

    id: int
    config: Config
    algorithm: Algorithm
    device: torch.device
    data: ClientData
    lock: threading.Lock
    view: View
    handles: dict[int, ClientHandle]
    inbox: Inbox
    outbox: Outbox
    laps: RingLaps
    topology: Topology
    published: dict[int, dict[str, torch.Tensor]]
    last_push: Payload | None
    recent_pushes: list[Payload]
    pushed_to: set[int]
    hand_off_tensors: dict[str, torch.Tensor]
    share_specs: dict[str, TensorSpec]
    init_specs: dict[str, TensorSpec]
    max_payload_bytes: int
    bounds: Bounds
    first_round: int
    round: int
    completed: int
    rejected: int
    journal_entries: list[JournalEntry]
    spool: Spool | None
    spool_lock: threading.Lock
    checkpoint_path: Path | None
    control: ControlLink
    run_clock: Callable[[], Pending[float]] | None  # asks the coordinator the run's seconds
    run_started_at: float  # this process's monotonic time when the run began
    next_period: int  # the first off period not yet applied or recorded
    hetero: Heterogeneity  # slow links wrap the handles peers are reached through
    _on_link: Callable[[Payload, int, float], None]
    timeouts: Timeouts
    offers: bool
    expected: dict[str, tuple[int, ...]]
    shared_specs: dict[str, TensorSpec]
    gather_wait_s: float
    exchange_control: ExchangeControl  # ``schedule.exchange``: what is taken of peers
    journal: Callable[[], list[dict]]  # the reports so far (``PeerAnswers.journal``)
