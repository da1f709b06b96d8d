"""A run's setting: everything in its config that changes what it computes, except the seed.

Runs averaged in one cell of a table must share it: a 2-client, 2-round run beside an
8-client, 10-round one is not a second seed of the same experiment.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ring_actors.report.runs import Run
from ring_actors.run_setting import setting_keys


def setting(run: Run) -> dict[str, str]:
    """The run's setting as dotted keys, values as text."""
    return {key: _text(value) for key, value in setting_keys(run.config).items()}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def differing_keys(groups: Sequence[Sequence[Run]]) -> tuple[str, ...]:
    """The setting keys whose values differ between runs of one group, over all groups."""
    keys: set[str] = set()
    for runs in groups:
        settings = [setting(run) for run in runs]
        for key in set().union(*settings):
            if len({s.get(key) for s in settings}) > 1:
                keys.add(key)
    return tuple(sorted(keys))


def label(run: Run, keys: Sequence[str]) -> str:
    """``key=value, ...`` of the run for ``keys``; a key it lacks shows as ``-``."""
    values = setting(run)
    return ", ".join(f"{key}={values.get(key, '-')}" for key in keys)


def check_seeds(cells: Mapping[Any, Sequence[Run]]) -> None:
    """Refuse a cell holding one seed twice: it would count as two seeds' agreement."""
    for runs in cells.values():
        by_seed: dict[int, list[Run]] = {}
        for run in runs:
            by_seed.setdefault(run.seed, []).append(run)
        for seed, same in sorted(by_seed.items()):
            if len(same) > 1:
                folders = ", ".join(str(run.path) for run in same)
                raise ValueError(
                    f"seed {seed} of one setting is counted twice ({folders}); report one "
                    "of them (remove the copy, or name the folders to report)"
                )
