"""A config read from a YAML file plus dotted overrides, or from a mapping, and validated."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ring_actors.config.checks import check
from ring_actors.config.coercion import apply_overrides, build_section, parse_yaml
from ring_actors.config.methods import (
    build_algorithm_section,
    for_chosen_method,
    try_plugin_backbone,
)
from ring_actors.config.sections import Config


def config_from_dict(data: Mapping[str, Any]) -> Config:
    """Validate a nested mapping into a :class:`Config`."""
    data = dict(data or {})
    algorithm = build_algorithm_section(data.pop("algorithm", {}) or {})
    config = dataclasses.replace(build_section(Config, data, ""), algorithm=algorithm)
    try_plugin_backbone(config)
    return config


def load_config(path: str | Path | None = None, overrides: Sequence[str] = ()) -> Config:
    """Read ``path`` (YAML; none means defaults), apply overrides, and validate.

    A file's setting serves any method. Under ``algorithm``, a section named after a method
    holds that method's options, and the keys beside ``name`` apply to the chosen method.
    When the overrides choose another method than the file's, the file's keys beside
    ``name`` stay behind (they were its method's), except the setting's ``backbone``. An
    option given on the command line (``algorithm.lr=0.05``) beats the chosen method's
    section in the file.
    """
    data: dict[str, Any] = {}
    if path is not None:
        data = parse_yaml(Path(path).read_text(), str(path)) or {}
        check(isinstance(data, dict), str(path), "a YAML mapping at the top level")
    merged = apply_overrides(data, overrides)
    return config_from_dict(for_chosen_method(data, merged, overrides))
