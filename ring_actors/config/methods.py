"""The ``algorithm`` section: which method runs, its options, sections named after methods."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ring_actors.config.checks import ConfigError, check
from ring_actors.config.coercion import build_section, parse_override
from ring_actors.config.sections import AlgorithmSection, Config

if TYPE_CHECKING:  # the methods, plug-ins and torch are imported where a name is resolved
    from ring_actors.algorithms import Algorithm


def method_sections(data: Mapping[Any, Any], chosen: str) -> dict[str, Any]:
    """The keys under ``algorithm`` that are a method's own section rather than an option."""
    from ring_actors.plugins.methods import known_names

    methods = {*known_names(), chosen}
    return {k: v for k, v in data.items() if isinstance(k, str) and (k in methods or ":" in k)}


def method_choices() -> str:
    from ring_actors.plugins.methods import known_names

    return f"one of {', '.join(known_names())}, or module:Class of your own method"


def resolve_method(name: str, key: str) -> type[Algorithm]:
    from ring_actors.plugins.methods import resolve_algorithm
    from ring_actors.plugins.paths import PluginError

    try:
        return resolve_algorithm(name)
    except PluginError as err:
        raise ConfigError(f"{key}: {err}; must be {method_choices()}") from err


def build_algorithm_section(data: Mapping[str, Any]) -> AlgorithmSection:
    """The chosen method's options: the keys beside ``name``, then its own section.

    A section named after a method (``algorithm: {dfedavg: {lr: 0.01}}``, or
    ``"my_module:MyMethod": {...}``) holds that method's options; every section is checked
    against its method, and only the chosen one's applies, over the keys beside ``name``.
    """
    check(isinstance(data, Mapping), "algorithm", "a mapping of keys")
    name = data.get("name", AlgorithmSection.name)
    check(isinstance(name, str), "algorithm.name", method_choices(), name)
    resolve_method(name, "algorithm.name")
    sections = method_sections(data, name)
    for other, section in sections.items():
        key = f"algorithm.{other}"
        check(isinstance(section, Mapping), key, f"a mapping of {other}'s options", section)
        build_section(resolve_method(other, key).Options, section, key)
    own = {k: v for k, v in data.items() if k != "name" and k not in sections}
    own.update(sections.get(name, {}))
    return AlgorithmSection(name=name, values=own)


def try_plugin_backbone(config: Config) -> None:
    """For a built-in dataset the images' shape and classes are known without reading data,
    so a backbone of one's own is checked with the config; with a loader of one's own,
    ``--dry-run`` and ``launch`` check it once the data is loaded."""
    from ring_actors.data.sources import dataset_facts
    from ring_actors.plugins.paths import is_plugin_path

    if not is_plugin_path(config.data.dataset):
        facts = dataset_facts(config.data.dataset, config.data.root)
        check_backbone_for(config, facts["input_shape"], facts["num_classes"])


def check_backbone_for(config: Config, input_shape: tuple[int, int, int], num_classes: int) -> None:
    """Build a backbone of one's own once for these images, so a broken contract stops the
    run before any actor starts rather than in every client."""
    from ring_actors.plugins.paths import PluginError, build_plugin_backbone, is_plugin_path

    backbone = getattr(config.algorithm.options, "backbone", None)
    if not is_plugin_path(backbone):
        return
    import torch

    with torch.random.fork_rng(devices=[]):  # checking leaves the global RNG alone
        try:
            build_plugin_backbone(backbone, input_shape, num_classes)
        except PluginError as err:
            raise ConfigError(f"algorithm.backbone: {err}") from err


SETTING_OPTIONS = ("name", "backbone")  # options that describe the setting, not the method


def for_chosen_method(
    data: Mapping[str, Any], merged: dict[str, Any], overrides: Sequence[str]
) -> dict[str, Any]:
    """``merged`` with its ``algorithm`` keys as :func:`load_config` says the method takes them."""
    after = merged.get("algorithm")
    name = after.get("name", AlgorithmSection.name) if isinstance(after, dict) else None
    if not isinstance(name, str):
        return merged  # config_from_dict names what is wrong
    before = data.get("algorithm")
    before = before if isinstance(before, Mapping) else {}
    sections = method_sections(after, name)
    paths = [parse_override(o)[0] for o in overrides]
    given = {p[1] for p in paths if len(p) == 2 and p[0] == "algorithm"}
    if ["algorithm"] in paths:  # the whole mapping came from the command line
        given |= set(after)
    given -= set(sections)
    kept = dict(after)
    if name != before.get("name", AlgorithmSection.name):
        kept = {k: v for k, v in after.items() if k in {*SETTING_OPTIONS, *sections, *given}}
    own = kept.get(name)
    if isinstance(own, dict):
        kept[name] = {k: v for k, v in own.items() if k not in given}
    return {**merged, "algorithm": kept}
