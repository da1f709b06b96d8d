"""The waits derived from the hop timeout keep the order the runtime relies on."""

from __future__ import annotations

import pytest

from ring_actors.config import config_from_dict
from ring_actors.timeouts import Timeouts


@pytest.mark.parametrize(("hop_s", "heartbeat_s"), [(0.5, 0.1), (30.0, 1.0), (2.0, 5.0)])
def test_a_joiner_waits_out_its_donors_bypass_and_the_next_donors_hop(hop_s, heartbeat_s):
    """A donor dead before the join is bypassed within its next probe (a heartbeat, give or
    take 10%), the probe's timeout and a reconcile pass; the next donor's hand-off then
    takes a hop. A joiner that gave up sooner would start fresh or not by timing."""
    schedule = {"hop_timeout_s": hop_s, "heartbeat_s": heartbeat_s}
    timeouts = Timeouts.from_schedule(config_from_dict({"schedule": schedule}).schedule)
    noticed_s = 1.1 * heartbeat_s + timeouts.probe_s + timeouts.reconcile_s
    assert timeouts.hand_off_s >= noticed_s + timeouts.hop_s - 1e-9
