"""The few lines that say what happened in a run, read from its own events file."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from jobs.run_story import tell


def event(time_s, kind, client, round_, detail="", latency_s=None):
    return {
        "time_s": time_s,
        "kind": kind,
        "client": client,
        "round": round_,
        "epoch": 1,
        "detail": detail,
        "latency_s": latency_s,
    }


def summary(output_dir, clients=6):
    return {
        "output_dir": str(output_dir),
        "clients": clients,
        "mode": "async",
        "rounds_completed": 8,
        "ring_order": [0, 2, 3, 5, 4],
    }


def test_a_crash_its_healing_and_a_joiner_are_told_in_order(tmp_path):
    events = [
        event(57.2, "join", 5, 4, "spliced in after 3"),
        event(40.9, "crash", 1, 1, "ActorDiedError", 0.8),
        event(40.9, "bypass", 1, 1, "ring now [0, 2, 3, 4]"),
        event(58.1, "join_initialised", 5, 2, "6653480 bytes from 3"),
        event(61.9, "healed", -1, 2, "every live member passed the bypass", 21.05),
    ]
    pq.write_table(pa.Table.from_pylist(events), tmp_path / "events.parquet")
    lines = tell(summary(tmp_path)).splitlines()
    assert lines[0] == "ring: 5 clients, async, 8 rounds; live at the end: [0, 2, 3, 5, 4]"
    assert lines[1] == (
        "crash: client 1 crashed after round 1; bypassed 0.8 s after its last sign of life; "
        "ring healed 21.1 s later (every survivor past the bypass)"
    )
    assert lines[2] == (
        "join: client 5 spliced in after 3, first round 4; its start: 6653480 bytes from 3"
    )
    assert len(lines) == 3


def test_a_run_without_events_says_only_the_ring(tmp_path):
    text = tell(summary(tmp_path / "no-run", clients=4))
    assert text == "ring: 4 clients, async, 8 rounds; live at the end: [0, 2, 3, 5, 4]"
