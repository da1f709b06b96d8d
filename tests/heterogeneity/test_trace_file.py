"""A trace file is checked like the YAML config: finite numbers of the right type, integer
client ids, each refusal a ConfigError naming the entry and the file, at load."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ring_actors.config import ConfigError, config_from_dict
from ring_actors.heterogeneity.model import Heterogeneity
from ring_actors.heterogeneity.trace_file import (
    MAX_COMPUTE_FACTOR,
    MAX_LATENCY_S,
    MAX_RUN_CLOCK_S,
    MIN_BANDWIDTH_BYTES_S,
)

EXAMPLE = Path(__file__).parents[2] / "examples" / "heterogeneity_trace.json"


def load(path: Path, clients: int = 4):
    return config_from_dict({"clients": {"count": clients}, "heterogeneity": {"trace": str(path)}})


@pytest.mark.parametrize(
    "text, entry",
    [
        ('{"compute": {"0": Infinity}}', "compute.0"),
        ('{"compute": {"1": NaN}}', "compute.1"),
        ('{"compute": {"0": true}}', "compute.0"),
        ('{"compute": {"0": "2"}}', "compute.0"),
        ('{"compute": {"0": 1e400}}', "compute.0"),
        ('{"compute": {"0.9": 2}}', "compute.0.9"),
        ('{"compute": {"03": 2}}', "compute.03"),
        ('{"compute": [2.0]}', "compute"),
        ('{"links": [{"from": 0.9, "to": 1, "latency_s": 0.1}]}', "links[0].from"),
        ('{"links": [{"from": "0.9", "to": 1, "latency_s": 0.1}]}', "links[0].from"),
        ('{"links": [{"from": 0, "to": true, "latency_s": 0.1}]}', "links[0].to"),
        ('{"links": [{"from": 0, "to": 1, "latency_s": Infinity}]}', "links[0].latency_s"),
        ('{"links": [{"from": 0, "to": 1, "latency_s": "0.1"}]}', "links[0].latency_s"),
        (
            '{"links": [{"from": 0, "to": 1, "bandwidth_bytes_s": true}]}',
            "links[0].bandwidth_bytes_s",
        ),
        ('{"links": [{"from": 0, "to": 1, "latency": 0.1}]}', "links[0]"),
        ('{"links": [[0, 1]]}', "links[0]"),
        ('{"latency_s": [[0, Infinity], [0.1, 0]]}', "latency_s[0][1]"),
        ('{"latency_s": [[0, 0.1], [-Infinity, 0]]}', "latency_s[1][0]"),
        ('{"latency_s": [1, 2]}', "latency_s[0]"),
        ('{"bandwidth_bytes_s": [[0, true], [1e6, 0]]}', "bandwidth_bytes_s[0][1]"),
        ('{"bandwidth_bytes_s": [[0, 1e6], ["1e6", 0]]}', "bandwidth_bytes_s[1][0]"),
        ('{"availability": {"3": [[10.0, Infinity]]}}', "availability.3[0]"),
        ('{"availability": {"3": [[true, 5.0]]}}', "availability.3[0]"),
        ('{"availability": {"3": [[1, 2, 3]]}}', "availability.3[0]"),
        ('{"availability": {"3": [1, 2]}}', "availability.3[0]"),
        ('{"availability": {"3": {"from": 1}}}', "availability.3"),
        ('{"availability": [[1, 2]]}', "availability"),
        ('{"availability": {"3": [[10.0, 1e10]]}}', "availability.3[0]"),
        ('{"compute": {"0": 1e300}}', "compute.0"),
        ('{"latency_s": [[0, 1e10], [0.1, 0]]}', "latency_s[0][1]"),
        ('{"links": [{"from": 0, "to": 1, "latency_s": 1e6}]}', "links[0].latency_s"),
        (
            '{"links": [{"from": 0, "to": 1, "bandwidth_bytes_s": 1e-300}]}',
            "links[0].bandwidth_bytes_s",
        ),
        ('{"bandwidth_bytes_s": [[0, 0.5], [1e6, 0]]}', "bandwidth_bytes_s[0][1]"),
    ],
)
def test_a_wrong_trace_entry_is_a_config_error_naming_the_entry_and_the_file(tmp_path, text, entry):
    path = tmp_path / "trace.json"
    path.write_text(text)
    with pytest.raises(ConfigError) as raised:
        load(path)
    message = str(raised.value)
    assert message.startswith(f"heterogeneity.trace: {path}: {entry}: must be "), message


def test_client_ids_as_object_keys_and_link_ends_as_integers_are_accepted(tmp_path):
    path = tmp_path / "trace.json"
    trace = {
        "compute": {"3": 8, "0": 1.0},
        "links": [{"from": 3, "to": 0, "latency_s": 0, "bandwidth_bytes_s": 1000}],
        "latency_s": [[0, 0.5], [None, None]],
        "availability": {"3": [[10, 25.5]]},
    }
    path.write_text(json.dumps(trace))
    model = Heterogeneity(load(path).heterogeneity, 0, 4)
    assert model.factors == [1.0, 1.0, 1.0, 8.0]
    assert model.link(3, 0) == (0.0, 1000.0) and model.link(0, 1) == (0.5, None)
    assert model.link(1, 0) == (0.0, None)  # null in a matrix: not given
    assert model.offline_periods(3) == [(10.0, 25.5)]


def test_the_shipped_example_trace_loads():
    load(EXAMPLE)


def test_a_trace_naming_a_client_past_the_run_names_the_part_and_the_file(tmp_path):
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"latency_s": [[0, 1, 1]] * 3}))
    expected = f"heterogeneity.trace: {path}: links: must be client ids in [0, 2)"
    with pytest.raises(ConfigError, match=re.escape(expected)):
        load(path, clients=2)


@pytest.mark.parametrize(
    "part, entry, allowed",
    [
        (
            {"availability": {"3": [[10.0, 1e10]]}},
            "availability.3[0]",
            f"[from_s, to_s]: finite numbers with 0 <= from_s < to_s <= {MAX_RUN_CLOCK_S:g}",
        ),
        (
            {"compute": {"0": 1e300}},
            "compute.0",
            f"a finite number in [1, {MAX_COMPUTE_FACTOR:g}] (1 = full speed)",
        ),
        (
            {"links": [{"from": 0, "to": 1, "latency_s": 1e10}]},
            "links[0].latency_s",
            f"a finite number in [0, {MAX_LATENCY_S:g}] (seconds) or null",
        ),
        (
            {"links": [{"from": 0, "to": 1, "bandwidth_bytes_s": 1e-300}]},
            "links[0].bandwidth_bytes_s",
            f"a finite number >= {MIN_BANDWIDTH_BYTES_S:g} (bytes/s) or null",
        ),
    ],
)
def test_a_trace_value_past_its_bound_names_the_file_the_field_and_the_range(
    tmp_path, part, entry, allowed
):
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(part))
    with pytest.raises(ConfigError) as raised:
        load(path)
    assert str(raised.value).startswith(f"heterogeneity.trace: {path}: {entry}: must be {allowed}")
