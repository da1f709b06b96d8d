"""The run folder as a user names it: checked before anything is written, so a launch that
cannot start leaves nothing behind and a finished result is never written over."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ring_actors.config import Config, load_config
from ring_actors.run_setting import flatten
from ring_actors.storage.run_folder import RunFolder

CHECKPOINT = RunFolder.COORDINATOR  # the coordinator's checkpoint: the mark of a run
SUMMARY = RunFolder.SUMMARY
# Overrides a resumed run may take: where it runs, not what it computes.
RESUMABLE_PREFIXES = ("ray.",)


class RunFolderError(Exception):
    """A run folder that cannot be used as asked; the message says what to change."""


def portable(text: str) -> str:
    """``text`` as a file name every system and copy tool takes: letters, digits, ``.``,
    ``_`` and ``-``; ``examples.fedprox:FedProx`` -> ``examples.fedprox-FedProx``."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.") or "run"


def check_new(output_dir: Path) -> None:
    """Refuse a folder that holds another run: its checkpoints would be resumed as ours."""
    if (output_dir / CHECKPOINT).exists() or (output_dir / SUMMARY).exists():
        raise RunFolderError(
            f"--output-dir {output_dir} already holds a run; pass another --output-dir, "
            f"or --resume {output_dir} to continue it"
        )


def check_resumable(run_dir: Path, rounds: int) -> None:
    """Refuse a folder that holds no run, and a run that ended: its rounds done, its time
    budget spent, or stopped. Only a run cut short (its driver killed or interrupted)
    goes on: one that ended would start over from its own results."""
    if not (run_dir / CHECKPOINT).exists():
        raise RunFolderError(
            f"--resume {run_dir}: no run to resume there ({CHECKPOINT} is missing); "
            "give the folder of a run that was interrupted"
        )
    finished = finished_summary(run_dir, rounds)
    if finished is not None:
        raise RunFolderError(
            f"--resume {run_dir}: the run finished ({_why(finished, rounds)}) and its results "
            "stay as they are; start a new run with --output-dir to train again"
        )


def finished_summary(run_dir: Path, rounds: int) -> dict[str, Any] | None:
    """The run's final summary when the run ended (see :func:`check_resumable`), else None."""
    try:
        summary = json.loads((run_dir / SUMMARY).read_text())
    except (OSError, ValueError):
        return None
    if summary.get("partial") is not False:  # the run's last outputs were never written
        return None
    ended = summary.get("ended_because", _ended_before_recorded(summary, rounds))
    return {**summary, "ended_because": ended} if ended else None


def _ended_before_recorded(summary: dict[str, Any], rounds: int) -> str | None:
    """Why a run whose summary predates ``ended_because`` ended: all its ``rounds`` or a
    stop. One ended by its time budget cannot be told from an interrupted one there."""
    if summary.get("stopped"):
        return "stopped"
    return "rounds" if int(summary.get("rounds_completed", 0)) >= rounds else None


def _why(summary: dict[str, Any], rounds: int) -> str:
    done = f"{summary.get('rounds_completed', 0)} of its {rounds} rounds"
    return {
        "rounds": f"all {done}",
        "time_budget": f"experiment.time_budget_s ran out after {done}",
        "stopped": f"it stopped: {summary.get('stopped')}",
    }.get(summary["ended_because"], str(summary["ended_because"]))


def resume_config(run_dir: Path, overrides: Sequence[str]) -> Config:
    """The run's own config, with ``overrides`` only where they change nothing it computed;
    one that contradicts the saved config is refused, naming its keys, and so is a folder
    without a run or with a finished one (:func:`check_resumable`)."""
    if not (run_dir / CHECKPOINT).exists():
        check_resumable(run_dir, 0)  # names what is missing
    saved = load_config(run_dir / "config.yaml")
    wanted = load_config(run_dir / "config.yaml", overrides)
    before, after = flatten(saved.to_dict()), flatten(wanted.to_dict())
    changed = [
        key
        for key in sorted(before.keys() | after.keys())
        if before.get(key) != after.get(key) and not key.startswith(RESUMABLE_PREFIXES)
    ]
    if changed:
        raise RunFolderError(
            f"--resume {run_dir}: {', '.join(changed)} would differ from the run's "
            f"config.yaml; a resumed run keeps its settings (only {', '.join(RESUMABLE_PREFIXES)}* "
            "may change): drop these overrides, or start a new run with --output-dir"
        )
    check_resumable(run_dir, wanted.experiment.rounds)
    return wanted


# What a launch writes before its run starts: removed again when the launch fails.
LAUNCH_FILES = (*RunFolder.PUBLISHED, *RunFolder.PRIVATE)


def remove_unstarted(output_dir: Path, created: bool) -> None:
    """Leave no trace of a launch that never started: the folder if the launch made it, else
    only the files a launch writes (the user's own files there stay)."""
    if created:
        shutil.rmtree(output_dir, ignore_errors=True)
        return
    for name in LAUNCH_FILES:
        path = output_dir / name
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
