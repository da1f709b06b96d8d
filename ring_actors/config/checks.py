"""The config's one error type and its check: every refusal names the key and what is allowed."""

from __future__ import annotations

import re
from typing import Any


class ConfigError(ValueError):
    """A config key is unknown or its value is not allowed."""


def is_path_component(name: str) -> bool:
    return bool(re.fullmatch(r"[A-Za-z0-9._-]{1,100}", name)) and name not in (".", "..")


def check(ok: bool, key: str, allowed: str, value: Any = ...) -> None:
    if not ok:
        got = "" if value is ... else f", got {value!r}"
        raise ConfigError(f"{key}: must be {allowed}{got}")
