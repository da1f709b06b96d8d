"""Progress written to a file or a pipe: one line per finished round, no carriage returns,
ending on the run's final figures."""

from __future__ import annotations

import io

from ring_actors.coordinator.progress import Progress
from ring_actors.runtime.progress_bar import RoundProgress


def state(done: int, round_: int | None, local: float = 0.5) -> Progress:
    latest = {} if round_ is None else {"round": round_, "local_acc_mean": local}
    return Progress(
        round=0, newest=0, epoch=0, live=3, done=0, rounds_done=done, rounds_planned=6,
        finished=False, stopped=None, latest=latest,
    )  # fmt: skip


def test_off_a_terminal_each_round_is_one_line_and_the_end_shows_the_final_figures():
    out = io.StringIO()  # not a terminal
    shown = RoundProgress(6, enabled=True, stream=out)
    for done, round_ in ((0, None), (1, None), (3, 0), (4, 0), (6, 1)):
        shown.update(state(done, round_, local=0.1 * (done + 1)))
    summary = {"local_acc": {"mean": 0.875}, "global_acc": {"mean": 0.5}, "rounds_completed": 2}
    shown.finish(summary)
    text = out.getvalue()
    assert "\r" not in text
    lines = text.splitlines()
    assert len(lines) == 3, lines  # rounds 0 and 1, then the end
    assert "round 0 done: local_acc 0.400 (3/6 client-rounds)" in lines[0]
    assert "round 1 done" in lines[1]
    assert "finished: local_acc 0.875 global_acc 0.500 rounds 2" in lines[2]


def test_disabled_progress_writes_nothing():
    out = io.StringIO()
    shown = RoundProgress(6, enabled=False, stream=out)
    shown.update(state(3, 0))
    shown.finish({"local_acc": {"mean": 0.8}, "global_acc": {"mean": 0.4}, "rounds_completed": 1})
    assert out.getvalue() == ""
