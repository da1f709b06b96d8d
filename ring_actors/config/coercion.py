"""Typed YAML: plain values coerced into the sections' field types, and dotted overrides applied."""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any, Literal

import yaml

from ring_actors.config.checks import ConfigError, check

if TYPE_CHECKING:
    from ring_actors.plugins.paths import OrPlugin


def number_or_text(text: str) -> float | str:
    try:
        return float(text)
    except ValueError:
        return text


def _describe(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Annotated:
        base, *marks = typing.get_args(tp)
        plugins = [m.what for m in _plugin_marks(marks)]
        return ", or ".join([_describe(base), *plugins])
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in typing.get_args(tp))
    if tp is type(None):
        return "null"
    if origin is tuple:
        return f"a list of {_describe(typing.get_args(tp)[0])}"
    return getattr(tp, "__name__", str(tp))


def _plugin_marks(marks: Sequence[Any]) -> list[OrPlugin]:
    """The field's :class:`OrPlugin` marks. Imported here: a field carrying one was declared
    by a module that imported it, and a process reading only plain sections never needs it."""
    from ring_actors.plugins.paths import OrPlugin

    return [m for m in marks if isinstance(m, OrPlugin)]


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """``value`` as type ``tp``, or a ConfigError naming ``key`` and what is allowed."""
    origin = typing.get_origin(tp)
    if origin is Annotated:
        return _coerce_or_plugin(value, tp, key)
    if origin is Literal:
        check(value in typing.get_args(tp), key, _describe(tp), value)
        return value
    if origin in (typing.Union, types.UnionType):
        for option in typing.get_args(tp):
            try:
                return _coerce(value, option, key)
            except ConfigError:
                continue
        raise ConfigError(f"{key}: must be {_describe(tp)}, got {value!r}")
    if tp is type(None):
        check(value is None, key, "null")
        return None
    if origin is tuple:
        check(isinstance(value, Sequence) and not isinstance(value, str), key, _describe(tp), value)
        item = typing.get_args(tp)[0]
        return tuple(_coerce(v, item, f"{key}[{i}]") for i, v in enumerate(value))
    if dataclasses.is_dataclass(tp):
        check(isinstance(value, Mapping), key, "a mapping of keys", value)
        return build_section(tp, value, key)
    if tp is bool:
        check(isinstance(value, bool), key, "true or false", value)
        return value
    if tp is int:
        check(isinstance(value, int) and not isinstance(value, bool), key, "an integer", value)
        return value
    if tp is float:
        if isinstance(value, str):  # YAML reads 1e-3 (no dot) as a string
            value = number_or_text(value)
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        check(ok and math.isfinite(value), key, "a finite number", value)
        return float(value)
    if tp is str:
        check(isinstance(value, str), key, "a string", value)
        return value
    raise ConfigError(f"{key}: unsupported type {tp!r}")


def _coerce_or_plugin(value: Any, tp: Any, key: str) -> Any:
    """A ``module:Name`` value checked by the field's :class:`OrPlugin`, else the plain type."""
    from ring_actors.plugins.paths import PluginError, is_plugin_path

    base, *marks = typing.get_args(tp)
    plugin = next(iter(_plugin_marks(marks)), None)
    if plugin is None or not is_plugin_path(value):
        try:
            return _coerce(value, base, key)
        except ConfigError:
            raise ConfigError(f"{key}: must be {_describe(tp)}, got {value!r}") from None
    try:
        plugin.resolve(value)
    except PluginError as err:
        raise ConfigError(f"{key}: {err}; must be {_describe(tp)}") from err
    return value


def build_section(cls: type, data: Mapping[str, Any], prefix: str) -> Any:
    hints = typing.get_type_hints(cls, include_extras=True)
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(data) - set(names), key=str)  # YAML keys need not be strings
    if unknown:
        where = f"{prefix}." if prefix else ""
        raise ConfigError(f"unknown key {where}{unknown[0]}; allowed keys here: {', '.join(names)}")
    required = [
        f.name
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    for name in required:
        check(name in data, f"{prefix}.{name}" if prefix else name, "given (it is required)")
    kwargs = {}
    for name in names:
        if name in data:
            key = f"{prefix}.{name}" if prefix else name
            kwargs[name] = _coerce(data[name], hints[name], key)
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{prefix}.{err}" if prefix else str(err)) from err


def parse_override(text: str) -> tuple[list[str], Any]:
    """``a.b.c=value`` into its path and a YAML-typed value (``3`` int, ``null`` None, ...)."""
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise ConfigError(f"override {text!r}: expected dotted.key=value")
    return key.strip().split("."), parse_yaml(raw, f"override {key}") if raw.strip() else None


def parse_yaml(text: str, where: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigError(f"{where}: not valid YAML ({str(err).splitlines()[0]})") from err


def apply_overrides(data: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """A copy of ``data`` with each ``dotted.key=value`` set."""
    merged = yaml.safe_load(yaml.safe_dump(data)) or {}
    for text in overrides:
        path, value = parse_override(text)
        node = merged
        for part in path[:-1]:
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            check(isinstance(child, dict), ".".join(path), "a key inside a mapping")
            node = child
        node[path[-1]] = value
    return merged
