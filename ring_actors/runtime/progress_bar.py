"""What the driver shows while a run goes on: a bar on a terminal, a line per round elsewhere.

A bar redraws itself with carriage returns, which a log file or a pipe keeps as hundreds of
updates; written to one of those, the progress is one line per finished round instead.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from typing import Any, TextIO

from tqdm import tqdm

from ring_actors.coordinator.progress import Progress

SHOWN = ("local_acc", "global_acc", "loss")  # the round means shown, in this order


def progress_note(text: str, stream: TextIO | None = None) -> None:
    """Say what the driver waits for before the first round (data, placement)."""
    print(f"{text} ...", file=stream or sys.stderr, flush=True)


class RoundProgress:
    """A run's progress from the coordinator's snapshots, then its summary."""

    def __init__(self, total: int, enabled: bool, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.lines = enabled and not self.stream.isatty()
        self.started = time.monotonic()
        self.round_shown = -1
        self.first_round_seen = False
        self.bar = tqdm(
            total=total,
            desc="waiting for the clients' first round",
            unit="rd",
            file=self.stream,
            disable=not enabled or self.lines,
        )

    def write(self, text: str) -> None:
        """A message that does not break the bar."""
        self.bar.write(text, file=sys.stderr)

    def update(self, state: Progress) -> None:
        done, planned = state.rounds_done, state.rounds_planned or self.bar.total
        latest = state.latest
        self.bar.total = planned
        if done and not self.first_round_seen:
            self.first_round_seen = True
            self.bar.set_description("client-rounds", refresh=False)
        self.bar.update(done - self.bar.n)
        if latest:
            self.bar.set_postfix(_means(latest) | {"round": latest["round"]}, refresh=False)
        if self.lines and latest and latest["round"] > self.round_shown:
            self.round_shown = latest["round"]
            means = " ".join(f"{k} {v}" for k, v in _means(latest).items())
            self._line(f"round {latest['round']} done: {means} ({done}/{planned} client-rounds)")

    def finish(self, summary: Mapping[str, Any]) -> None:
        """End on the run's final figures, not on the last round seen while it went on."""
        final = {
            "local_acc": f"{summary['local_acc']['mean']:.3f}",
            "global_acc": f"{summary['global_acc']['mean']:.3f}",
            "rounds": summary["rounds_completed"],
        }
        self.bar.set_postfix(final, refresh=True)
        self.bar.close()
        if self.lines:
            self._line("finished: " + " ".join(f"{k} {v}" for k, v in final.items()))

    def close(self) -> None:
        self.bar.close()

    def _line(self, text: str) -> None:
        print(f"[{time.monotonic() - self.started:6.1f} s] {text}", file=self.stream, flush=True)


def _means(latest: Mapping[str, Any]) -> dict[str, str]:
    values = {k.removesuffix("_mean"): v for k, v in latest.items() if k != "round"}
    return {k: f"{values[k]:.3f}" for k in SHOWN if k in values}
