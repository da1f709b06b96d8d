"""Numbers finite and in range, names usable as a folder name, and a loader that answers any
input with a valid config or a ConfigError naming the key, never another exception."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ring_actors.algorithms import ALGORITHMS
from ring_actors.config import Config, ConfigError, config_from_dict, load_config


@pytest.mark.parametrize(
    "override, key",
    [
        ("algorithm.lr=.inf", "algorithm.lr"),
        ("algorithm.lr=.nan", "algorithm.lr"),
        ("schedule.hop_timeout_s=-.inf", "schedule.hop_timeout_s"),
        ("experiment.seed=-1", "experiment.seed"),
        ("experiment.name=../../escaped", "experiment.name"),
        ("experiment.name=a/b", "experiment.name"),
        ("experiment.name=..", "experiment.name"),
        ("schedule.stall_hops=1", "schedule.stall_hops"),
        ("schedule.on_client_error=ignore", "schedule.on_client_error"),
        ("eval.last_rounds=0", "eval.last_rounds"),
        ("eval.local_max_samples=0", "eval.local_max_samples"),
        ("tracking.give_up_s=0", "tracking.give_up_s"),
        ("checkpoint.every_rounds=0", "checkpoint.every_rounds"),
        ("faults=[{at_round: 1, error: [9]}]", "faults[].error"),
    ],
)
def test_bad_values_name_their_key(override, key):
    with pytest.raises(ConfigError, match=key.replace("[", r"\[").replace("]", r"\]")):
        load_config(None, [override])


@pytest.mark.parametrize(
    "override, key",
    [
        ("tracking.upload_checkpoints=true", "upload_checkpoints"),
        ("tracking.parent_run_id=r", "parent_run_id"),
    ],
)
def test_tracking_off_refuses_what_only_an_mlflow_run_would_hold(override, key):
    with pytest.raises(ConfigError, match=f"tracking.{key}: .* as tracking.enabled is false"):
        load_config(None, ["tracking.enabled=false", override])
    assert load_config(None, [override]).tracking.enabled  # with tracking on, both are fine


def test_scientific_notation_without_a_dot_is_a_number():
    assert load_config(None, ["algorithm.lr=1e-3"]).algorithm.options.lr == pytest.approx(1e-3)


SECTIONS = ["experiment", "data", "clients", "algorithm", "topology", "schedule", "eval"]
KEYS = ["name", "seed", "rounds", "count", "lr", "mode", "kind", "beta", "hop_timeout_s", "x"]
values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(10**6), 10**6),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=8),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(KEYS), inner, max_size=3)
    ),
    max_leaves=8,
)
trees = st.dictionaries(
    st.one_of(st.sampled_from(SECTIONS), st.text(max_size=5)),
    st.one_of(st.dictionaries(st.sampled_from(KEYS), values, max_size=4), values),
    max_size=4,
)


@given(trees)
def test_any_tree_is_a_config_or_a_config_error(tree):
    try:
        assert isinstance(config_from_dict(tree), Config)
    except ConfigError as err:
        assert str(err)  # names what is wrong


@given(
    st.lists(
        st.tuples(
            st.sampled_from([f"{s}.{k}" for s in SECTIONS for k in KEYS] + ["faults", "x"]),
            st.text(max_size=10),
        ),
        max_size=3,
    )
)
def test_any_dotted_override_is_a_config_or_a_config_error(pairs):
    try:
        load_config(None, [f"{key}={value}" for key, value in pairs])
    except ConfigError as err:
        assert str(err)


CELL = "jobs/configs/paper/drdfl-cifar10-dir0.1.yaml"


@pytest.mark.parametrize("method", sorted(ALGORITHMS))
def test_any_method_runs_on_a_paper_cell_with_its_own_defaults(method):
    config = load_config(CELL, [f"algorithm.name={method}"])
    defaults = ALGORITHMS[method].Options()
    expected = dataclasses.replace(defaults, backbone="resnet18")  # the cell's setting stays
    assert config.algorithm.name == method and config.algorithm.options == expected
    assert config.data.partition.beta == 0.1 and config.clients.count == 20


def test_command_line_options_apply_to_the_chosen_method():
    config = load_config(CELL, ["algorithm.name=dfedavg", "algorithm.lr=0.05"])
    assert config.algorithm.options.lr == 0.05


def test_method_sections_are_checked_and_the_chosen_one_applies():
    tree = {"algorithm": {"name": "dfedavg", "lr": 0.1, "dfedavg": {"lr": 0.2}, "drdfl": {}}}
    assert config_from_dict(tree).algorithm.options.lr == 0.2
    tree["algorithm"]["drdfl"] = {"alpha": "high"}
    with pytest.raises(ConfigError, match="algorithm.drdfl.alpha"):
        config_from_dict(tree)
