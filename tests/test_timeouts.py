"""Every wait from the one hop timeout: a client's call asked again while unanswered stops at
its deadline, and its pauses grow, so a coordinator down for long is not asked in a loop."""

from __future__ import annotations

import time

from ring_actors.config import ScheduleSection
from ring_actors.timeouts import Timeouts


def test_a_control_call_is_asked_again_with_growing_pauses_until_its_deadline():
    timeouts = Timeouts.from_schedule(ScheduleSection(hop_timeout_s=0.1))
    assert (timeouts.control_retry_s, timeouts.control_give_up_s) == (0.025, 1.0)
    started = time.monotonic()
    asked_at, waits = [], []
    for wait_s in timeouts.control_attempts():  # each attempt unanswered at once
        asked_at.append(time.monotonic() - started)
        waits.append(wait_s)
    ended = time.monotonic() - started
    assert asked_at[0] < 0.01 and 0.8 <= ended <= 1.0 + 0.1
    pauses = [b - a for a, b in zip(asked_at, asked_at[1:], strict=False)]
    assert pauses[0] < pauses[1] < pauses[2] and max(pauses) < timeouts.client_control_s + 0.05
    assert all(0 <= w <= timeouts.client_control_s for w in waits)
