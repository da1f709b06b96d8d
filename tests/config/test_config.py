"""Config loading: defaults, the quickstart file, dotted overrides and validation errors."""

from __future__ import annotations

import dataclasses
import re
import typing
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ring_actors.algorithms import ALGORITHMS, AlgorithmOptions
from ring_actors.algorithms.dfedavg import DFedAvgOptions
from ring_actors.algorithms.drdfl import DRDFLOptions
from ring_actors.config import (
    Config,
    ConfigError,
    FaultSection,
    apply_overrides,
    config_from_dict,
    load_config,
    parse_override,
)

QUICKSTART = Path(__file__).resolve().parents[2] / "jobs" / "configs" / "quickstart.yaml"


def error_of(overrides: list[str], path: Path | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(path, overrides)
    return str(info.value)


# ---- loading -------------------------------------------------------------------------------


def test_defaults_load_as_the_dataclass_defaults():
    config = load_config()
    assert config == Config()
    assert config.clients.count == 8
    assert config.algorithm.name == "drdfl"
    assert isinstance(config.algorithm.options, DRDFLOptions)
    assert config.faults == ()


def test_quickstart_yaml_loads_with_its_values():
    raw = yaml.safe_load(QUICKSTART.read_text())
    config = load_config(QUICKSTART)
    assert config.experiment.name == raw["experiment"]["name"]
    assert config.experiment.rounds == raw["experiment"]["rounds"]
    assert config.data.dataset == raw["data"]["dataset"]
    assert config.data.max_train_per_client == raw["data"]["max_train_per_client"]
    assert config.data.partition.kind == raw["data"]["partition"]["kind"]
    assert config.clients.count == raw["clients"]["count"]
    assert config.algorithm.name == raw["algorithm"]["name"]
    assert type(config.algorithm.options) is ALGORITHMS[config.algorithm.name].Options
    method_default = ALGORITHMS[config.algorithm.name].Options().lr
    assert config.algorithm.options.lr == raw["algorithm"].get("lr", method_default)
    assert config.schedule.hop_timeout_s == raw["schedule"]["hop_timeout_s"]
    assert isinstance(config.schedule.hop_timeout_s, float)  # may be an int in YAML: coerced
    assert config.tracking.uri is None
    assert len(config.faults) == len(raw.get("faults") or [])


def test_top_level_yaml_must_be_a_mapping(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(path)


# ---- overrides -----------------------------------------------------------------------------


def test_overrides_are_typed_by_yaml():
    config = load_config(
        QUICKSTART, ["clients.count=4", "tracking.uri=null", "data.partition.beta=0.1"]
    )
    assert config.clients.count == 4 and type(config.clients.count) is int
    assert config.tracking.uri is None
    assert config.data.partition.beta == pytest.approx(0.1)
    assert type(config.data.partition.beta) is float


def test_parse_override_types_and_paths():
    assert parse_override("a.b.c=3") == (["a", "b", "c"], 3)
    assert parse_override("x=null") == (["x"], None)
    assert parse_override("x=") == (["x"], None)
    assert parse_override("x=true") == (["x"], True)
    assert parse_override("x=[1, 2]") == (["x"], [1, 2])
    assert parse_override("x=abc") == (["x"], "abc")


def test_string_override_sets_a_string_value():
    config = load_config(None, ["tracking.uri=sqlite:///x.db", "experiment.name=run7"])
    assert config.tracking.uri == "sqlite:///x.db"
    assert config.experiment.name == "run7"


def test_nested_override_creates_missing_keys():
    merged = apply_overrides({}, ["data.partition.kind=iid"])
    assert merged == {"data": {"partition": {"kind": "iid"}}}
    config = load_config(None, ["data.partition.kind=iid", "data.partition.min_size=3"])
    assert config.data.partition.kind == "iid"
    assert config.data.partition.min_size == 3
    assert config.data.dataset == "fashion-mnist"  # siblings keep their defaults


def test_apply_overrides_does_not_mutate_its_input():
    data = {"clients": {"count": 8}}
    merged = apply_overrides(data, ["clients.count=3"])
    assert merged["clients"]["count"] == 3
    assert data == {"clients": {"count": 8}}


def test_override_below_a_scalar_is_rejected():
    with pytest.raises(ConfigError, match=r"clients\.count\.x"):
        apply_overrides({"clients": {"count": 8}}, ["clients.count.x=1"])


@pytest.mark.parametrize("text", ["foo", "=3", ""])
def test_malformed_override_errors(text):
    with pytest.raises(ConfigError, match="dotted.key=value"):
        parse_override(text)
    with pytest.raises(ConfigError):
        load_config(None, [text])


# ---- unknown keys --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("override", "key", "allowed"),
    [
        ("foo=1", "foo", ["experiment", "data", "clients", "algorithm", "faults"]),
        ("data.foo=1", "data.foo", ["dataset", "root", "download", "partition"]),
        ("data.partition.foo=1", "data.partition.foo", ["kind", "beta", "min_size"]),
        ("clients.foo=1", "clients.foo", ["count", "num_cpus", "batch_size", "placement"]),
        ("schedule.foo=1", "schedule.foo", ["mode", "hop_timeout_s", "max_staleness"]),
        ("algorithm.foo=1", "algorithm.foo", ["lr", "backbone", "alpha", "latent_learngene"]),
        (
            "faults=[{at_round: 1, slow: [0], delay_s: 1, foo: 2}]",
            "faults[0].foo",
            ["at_round", "slow", "delay_s"],
        ),
    ],
)
def test_unknown_key_names_full_dotted_key_and_allowed_keys(override, key, allowed):
    message = error_of([override])
    assert f"unknown key {key};" in message
    listed = message.split("allowed keys here:")[1]
    for name in allowed:
        assert re.search(rf"\b{name}\b", listed), (name, message)


SECTIONS = [f for f in dataclasses.fields(Config) if dataclasses.is_dataclass(f.default_factory)]


@pytest.mark.parametrize("section", SECTIONS, ids=lambda f: f.name)
def test_unknown_key_in_every_section(section):
    message = error_of([f"{section.name}.nope=1"])
    default = getattr(Config(), section.name)
    # The algorithm section lists the default method's options (``name`` is handled apart).
    cls = type(default.options) if section.name == "algorithm" else type(default)
    names = [f.name for f in dataclasses.fields(cls)]
    assert message == f"unknown key {section.name}.nope; allowed keys here: {', '.join(names)}"


# ---- bad values ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("override", "key", "fragment"),
    [
        ("clients.count=abc", "clients.count", "an integer"),
        ("clients.count=2.5", "clients.count", "an integer"),
        ("experiment.rounds=true", "experiment.rounds", "an integer"),
        ("data.download=1", "data.download", "true or false"),
        ("schedule.hop_timeout_s=fast", "schedule.hop_timeout_s", "a finite number"),
        ("data.max_train_per_client=x", "data.max_train_per_client", "int or null"),
        ("clients=3", "clients", "a mapping"),
        ("algorithm.alpha=abc", "algorithm.alpha", "a finite number"),
        ("clients.count=1", "clients.count", ">= 2"),
        ("clients.num_gpus=1.5", "clients.num_gpus", "[0, 1]"),
        ("clients.reserve=-1", "clients.reserve", ">= 0"),
        ("experiment.rounds=0", "experiment.rounds", ">= 1"),
        ("data.partition.beta=0", "data.partition.beta", "> 0"),
        ("data.max_train_per_client=0", "data.max_train_per_client", ">= 1"),
        ("eval.every=0", "eval.every", ">= 1"),
        ("schedule.max_staleness=-1", "schedule.max_staleness", ">= 0"),
        ("algorithm.lr=0", "algorithm.lr", "> 0"),
        ("algorithm.alpha=2", "algorithm.alpha", "[0, 1]"),
    ],
)
def test_a_wrong_value_names_its_key_and_what_is_allowed(override, key, fragment):
    """A value of the wrong type or out of range: the message's first word is the key."""
    message = error_of([override])
    assert message.split()[0].rstrip(":") == key, message
    assert fragment in message


@pytest.mark.parametrize(
    ("override", "key", "allowed"),
    [
        ("schedule.mode=eventually", "schedule.mode", ["'sync'", "'async'"]),
        ("clients.placement=x", "clients.placement", ["'spread'", "'pack'"]),
        ("data.partition.kind=x", "data.partition.kind", ["'iid'", "'dirichlet'", "'shard'"]),
        ("topology.kind=star", "topology.kind", ["'ring'"]),
        ("algorithm.backbone=vgg", "algorithm.backbone", ["'cnn'", "'resnet18'"]),
        ("algorithm.merge=mix", "algorithm.merge", ["'average'", "'replace'"]),
        ("algorithm.name=fedprox", "algorithm.name", ["local", "dfedavg", "drdfl"]),
        ("data.dataset=imagenet", "data.dataset", ["mnist", "cifar10", "svhn"]),
    ],
)
def test_bad_choice_names_key_and_allowed_values(override, key, allowed):
    message = error_of([override])
    assert message.startswith(f"{key}:"), message
    for value in allowed:
        assert value in message
    assert override.split("=")[1] in message  # the rejected value is echoed


# ---- algorithm options ---------------------------------------------------------------------


def test_algorithm_name_selects_the_options_class():
    assert type(load_config(None, ["algorithm.name=dfedavg"]).algorithm.options) is (DFedAvgOptions)
    assert type(load_config(None, ["algorithm.name=local"]).algorithm.options) is (AlgorithmOptions)
    assert type(load_config(None, ["algorithm.name=drdfl"]).algorithm.options) is DRDFLOptions


def test_method_specific_key_accepted_for_drdfl_rejected_for_dfedavg():
    config = load_config(None, ["algorithm.name=drdfl", "algorithm.alpha=0.5"])
    assert config.algorithm.options.alpha == 0.5
    message = error_of(["algorithm.name=dfedavg", "algorithm.alpha=0.5"])
    assert "unknown key algorithm.alpha" in message
    assert "lr" in message and "backbone" in message
    # Switching the quickstart file to dfedavg refuses a DRDFL key on top of it too.
    message = error_of(["algorithm.name=dfedavg", "algorithm.latent_learngene=8"], QUICKSTART)
    assert "unknown key algorithm.latent_learngene" in message


def test_shared_algorithm_options_apply_to_every_method():
    for name in ALGORITHMS:
        overrides = [f"algorithm.name={name}", "algorithm.lr=0.05", "algorithm.optimizer=sgd"]
        config = load_config(QUICKSTART, overrides)
        assert config.algorithm.options.lr == 0.05
        assert config.algorithm.options.optimizer == "sgd"


# ---- setting and method apart ----------------------------------------------------------------

PAPER = QUICKSTART.parent / "paper"
# One cell of each family: their method options sit in a section named after the method.
CELLS = [
    PAPER / f"{c}.yaml"
    for c in (
        "drdfl-cifar10-dir0.1",
        "gene-fl-svhn-shard4",
        "pfedgm-cifar100-dir0.5",
        "ua-pdfl-svhn-dir5",
    )
]


@pytest.mark.parametrize("method", sorted(ALGORITHMS))
@pytest.mark.parametrize("cell", CELLS, ids=lambda p: p.stem)
def test_every_method_runs_on_a_paper_cell_with_its_own_defaults(cell, method):
    own = load_config(cell)
    raw = yaml.safe_load(cell.read_text())["algorithm"]
    allowed = typing.get_args(typing.get_type_hints(ALGORITHMS[method].Options)["backbone"])
    if raw.get("backbone", allowed[0]) not in allowed:  # e.g. fedbn needs BatchNorm layers
        with pytest.raises(ConfigError, match="algorithm.backbone: must be one of"):
            load_config(cell, [f"algorithm.name={method}"])
        return
    config = load_config(cell, [f"algorithm.name={method}"])
    defaults = ALGORITHMS[method].Options()
    setting = {"backbone": raw["backbone"]} if "backbone" in raw else {}
    if method == own.algorithm.name:
        assert config == own  # naming the cell's own method changes nothing
    else:
        assert config.algorithm.options == dataclasses.replace(defaults, **setting)
    assert (config.data, config.clients, config.schedule, config.faults) == (
        own.data,
        own.clients,
        own.schedule,
        own.faults,
    )


def test_paper_cells_keep_method_options_in_the_methods_section():
    for path in sorted(PAPER.glob("*.yaml")):
        raw = yaml.safe_load(path.read_text())["algorithm"]
        assert set(raw) <= {"name", "backbone", raw["name"]}, path.name
        assert isinstance(raw[raw["name"]], dict), path.name


def test_a_command_line_option_beats_the_chosen_methods_section():
    cell = CELLS[0]
    in_file = yaml.safe_load(cell.read_text())["algorithm"]["drdfl"]
    config = load_config(cell, ["algorithm.lr=0.05"])
    assert config.algorithm.options.lr == 0.05 != in_file["lr"]
    assert config.algorithm.options.alpha == in_file["alpha"]  # the rest of the section holds
    assert load_config(cell, ["algorithm.drdfl.lr=0.07"]).algorithm.options.lr == 0.07
    whole = load_config(cell, ["algorithm={name: dfedavg, lr: 0.2}"]).algorithm
    assert (whole.name, whole.options.lr, whole.options.backbone) == ("dfedavg", 0.2, "cnn")


def test_another_methods_section_is_checked_but_not_applied(tmp_path):
    path = tmp_path / "cell.yaml"
    path.write_text("algorithm: {name: drdfl, lr: 0.002, dfedavg: {lr: 0.3, optimizer: sgd}}\n")
    assert load_config(path).algorithm.options.lr == 0.002
    chosen = load_config(path, ["algorithm.name=dfedavg"]).algorithm.options
    assert (chosen.lr, chosen.optimizer) == (0.3, "sgd")
    path.write_text("algorithm: {name: drdfl, dfedavg: {alpha: 0.5}}\n")
    assert "unknown key algorithm.dfedavg.alpha" in error_of([], path)
    path.write_text("algorithm: {name: drdfl, dfedavg: {lr: .inf}}\n")
    assert error_of([], path).startswith("algorithm.dfedavg.lr:")


# ---- faults --------------------------------------------------------------------------------


def test_faults_entries_parse_into_sections():
    config = load_config(None, ["faults=[{at_round: 2, slow: [1, 3], delay_s: 1}]"])
    assert config.faults == (FaultSection(at_round=2, slow=(1, 3), delay_s=1.0),)


@pytest.mark.parametrize("ids", ["[8]", "[-1]", "[0, 12]"])
def test_faults_client_ids_out_of_range(ids):
    message = error_of([f"faults=[{{at_round: 1, slow: {ids}, delay_s: 1}}]"])
    assert "faults[].slow" in message and "[0, 8)" in message


def test_total_clients_counts_the_first_the_reserve_and_the_planned_joiners():
    config = load_config(
        None, ["clients.count=4", "clients.reserve=2", "faults=[{at_round: 3, join: 3}]"]
    )
    assert config.total_clients == 9


def test_faults_client_ids_checked_against_the_configured_count():
    override = "faults=[{at_round: 1, slow: [5], delay_s: 1}]"
    assert load_config(None, [override]).faults[0].slow == (5,)
    assert "[0, 4)" in error_of(["clients.count=4", override])


@pytest.mark.parametrize(
    ("entry", "key"),
    [
        ("{at_round: -1, slow: [0], delay_s: 1}", "faults[].at_round"),
        ("{at_round: 1, slow: [], delay_s: 1}", "faults[]: must be an entry with exactly one"),
        ("{at_round: 1, crash: [0], join: 2}", "faults[]: must be an entry with exactly one"),
        ("{at_round: 1, hang: [0]}", "faults[].for_s"),
        ("{at_round: 1, crash: [9]}", "faults[].crash"),
        ("{at_round: 1, slow: [0], delay_s: 0}", "faults[].delay_s"),
        ("{at_round: 1, slow: [x], delay_s: 1}", "faults[0].slow[0]"),
    ],
)
def test_faults_bad_entries(entry, key):
    assert key in error_of([f"faults=[{entry}]"])


# ---- round trip ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides",
    [
        [],
        ["algorithm.alpha=0.5", "faults=[{at_round: 1, slow: [1, 2], delay_s: 0.5}]"],
        ["algorithm.name=dfedavg", "algorithm.backbone=resnet18", "tracking.uri=file:///x"],
    ],
)
def test_to_dict_round_trips(overrides):
    config = load_config(None, overrides)
    data = config.to_dict()
    assert data["algorithm"]["name"] == config.algorithm.name
    assert "options" not in data["algorithm"]  # flattened like the YAML
    for entry in data["faults"]:
        assert isinstance(entry["slow"], list)
    again = config_from_dict(data)
    assert again == config
    assert type(again.algorithm.options) is type(config.algorithm.options)


# ---- any input: a config or a ConfigError ------------------------------------------------------


def _field_names(cls: type) -> set[str]:
    names = set()
    for f in dataclasses.fields(cls):
        names.add(f.name)
        inner = f.default_factory if f.default_factory is not dataclasses.MISSING else None
        if inner is not None and dataclasses.is_dataclass(inner):
            names |= _field_names(inner)
    return names


NAMES = sorted(
    _field_names(Config)
    | {f.name for m in ALGORITHMS.values() for f in dataclasses.fields(m.Options)}
    | set(ALGORITHMS)
    | {"name", "examples.fedprox:FedProx", "x"}
)
keys = st.one_of(st.sampled_from(NAMES), st.integers(-2, 2), st.booleans(), st.text(max_size=4))
leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.floats(),
    st.sampled_from(["cnn", "ring", "sync", "dfedavg", "drdfl", "1e-3", "../x", "a:b"]),
    st.text(max_size=6),
)
values = st.recursive(
    leaves,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(keys, inner, max_size=4)),
    max_leaves=12,
)
overrides = st.lists(
    st.builds(
        lambda path, value: f"{'.'.join(path)}={value}",
        st.lists(st.sampled_from(NAMES), min_size=1, max_size=3),
        st.one_of(
            st.sampled_from(["", "null", "[1]", "{a: 1}", ".inf", "-1"]), st.text(max_size=6)
        ),
    ),
    max_size=3,
)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tree=st.dictionaries(keys, values, max_size=5), extra=overrides)
def test_any_yaml_file_and_overrides_give_a_config_or_a_config_error(tmp_path, tree, extra):
    path = tmp_path / "fuzz.yaml"
    path.write_text(yaml.safe_dump(tree))
    try:
        config = load_config(path, extra)
    except ConfigError as err:
        assert str(err)
    else:
        assert config_from_dict(config.to_dict()) == config  # what a run writes reads back


def test_keys_of_mixed_types_are_a_config_error():
    with pytest.raises(ConfigError, match="unknown key"):
        config_from_dict({1: 2, "x": 3})
    with pytest.raises(ConfigError, match="unknown key experiment"):
        config_from_dict({"experiment": {True: 1, "x": 2}})
