"""A client resumed from its checkpoint (a new driver continues the run) strikes the fault
plan's entries for the rounds it now runs, the first one included, and none of those its
checkpoint had already finished."""

from __future__ import annotations

import pytest
import torch

from ring_actors.client.core import ClientCore
from ring_actors.client.method_factory import build_algorithm
from ring_actors.client.resources import ClientData
from ring_actors.config import config_from_dict
from ring_actors.delivery.view import View
from tests.helpers.client_links import SHAPE, Reports
from tests.helpers.synthetic import separable

CHECKPOINT_ROUND = 1  # the round the client's checkpoint holds: it resumes with round 2


class Recorded:
    """A client's host that notes the crashes and freezes it is asked for instead."""

    def __init__(self) -> None:
        self.struck: list[str] = []

    def crash(self) -> None:
        self.struck.append("crash")

    def freeze(self, seconds: float) -> None:
        self.struck.append("hang")


class Failures(Reports):
    """The coordinator's side, with the rounds whose failure it was told of."""

    def __init__(self) -> None:
        super().__init__()
        self.failed: list[int] = []

    def report_failed(self, client_id: int, round_: int, error: str) -> None:
        self.failed.append(round_)


def resumed_client(
    action: str, at_round: int, struck_through: int = -1
) -> tuple[ClientCore, Recorded, Failures]:
    """A client alone in its view whose plan holds one ``action`` at ``at_round``, resumed from its
    checkpoint of ``CHECKPOINT_ROUND``; returns once its loop ended."""
    config = config_from_dict(
        {
            "experiment": {"rounds": 4},
            "clients": {"count": 2},
            "algorithm": {"name": "local"},
            "schedule": {"hop_timeout_s": 2},
            "faults": [{"at_round": at_round, action: [0], "for_s": 0.1}],
        }
    )
    data = separable(16, 4, SHAPE)
    method = build_algorithm(config, 0, 4, SHAPE, torch.device("cpu"))
    host, control = Recorded(), Failures()
    client = ClientCore(0, config, method, ClientData(data, data, data), control, faults=host)
    client.set_view(View(1, (0,), (0,)), {})
    client.progress.completed = CHECKPOINT_ROUND  # as restored from its checkpoint
    client.resume(struck_through)
    assert client.thread is not None
    client.thread.join(30)
    assert not client.thread.is_alive()
    return client, host, control


@pytest.mark.parametrize("action", ["crash", "hang", "error"])
def test_an_entry_for_the_first_round_run_after_a_resume_strikes(action):
    _, host, control = resumed_client(action, CHECKPOINT_ROUND + 1)
    struck = control.failed if action == "error" else host.struck
    assert struck == ([CHECKPOINT_ROUND + 1] if action == "error" else [action])


@pytest.mark.parametrize("action", ["crash", "hang", "error"])
def test_an_entry_for_a_round_the_checkpoint_finished_does_not_strike_again(action):
    client, host, control = resumed_client(action, CHECKPOINT_ROUND)
    assert not host.struck and not control.failed and client.completed == 3


def test_an_entry_for_a_round_redone_after_an_older_checkpoint_does_not_strike_again():
    """Checkpoints every few rounds: the coordinator heard of round 2, which the checkpoint
    (round 1) lags; round 2 is redone without its entry striking a second time."""
    client, host, _ = resumed_client("crash", CHECKPOINT_ROUND + 1, CHECKPOINT_ROUND + 1)
    assert not host.struck and client.completed == 3
