"""FedScale's device-info files, written here in their format, as a heterogeneity trace."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys

import pytest

from ring_actors.config import config_from_dict
from ring_actors.heterogeneity.fedscale import convert, offline_spans, read_pickle
from ring_actors.heterogeneity.model import Heterogeneity
from ring_actors.heterogeneity.trace_file import MAX_RUN_CLOCK_S, read_trace

CAPACITY = {
    101: {"computation": 50.0, "communication": 8000.0},  # 1 MB/s
    102: {"computation": 200.0, "communication": 800.0},
    103: {"computation": 100.0, "communication": 80000.0},
}
BEHAVE = {
    101: {"duration": 100, "active": [0, 50], "inactive": [30, 90], "finish_time": 100,
          "model": "a"},
    102: {"duration": 100, "active": [10], "inactive": [60], "finish_time": 100, "model": "b"},
    103: {"duration": 100, "active": [], "inactive": [], "finish_time": 100, "model": "c"},
}  # fmt: skip


@pytest.fixture
def files(tmp_path):
    paths = {}
    for name, data in (("client_device_capacity", CAPACITY), ("client_behave_trace", BEHAVE)):
        paths[name] = tmp_path / name
        paths[name].write_bytes(pickle.dumps(data))
    return paths


def test_offline_is_the_complement_of_online_repeated_and_scaled():
    spans = offline_spans(BEHAVE[101], time_scale=0.1, horizon_s=25.0)
    ends = [t for span in spans for t in span]
    assert ends == pytest.approx([3, 5, 9, 10, 13, 15, 19, 20, 23, 25])
    assert offline_spans(BEHAVE[102], 1.0, 150.0) == [[0.0, 10.0], [60.0, 110.0]]


def test_convert_gives_speed_factors_bandwidths_and_off_periods(files, tmp_path):
    capacity = read_pickle(files["client_device_capacity"])
    behave = read_pickle(files["client_behave_trace"])
    trace = convert(capacity, behave, clients=2, seed=0, time_scale=1.0, horizon_s=100.0)
    # 103 is never online, so both picks are 101 and 102 in a seeded order
    speeds = sorted(trace["compute"].values())
    assert speeds == [1.0, 4.0]
    fast = next(c for c, f in trace["compute"].items() if f == 1.0)
    slow = next(c for c, f in trace["compute"].items() if f == 4.0)
    assert trace["bandwidth_bytes_s"][int(fast)][int(slow)] == pytest.approx(1e6)
    assert trace["bandwidth_bytes_s"][int(slow)][int(fast)] == pytest.approx(1e5)
    assert trace["availability"][slow] == [[0.0, 10.0], [60.0, 100.0]]
    assert trace == convert(capacity, behave, clients=2, seed=0, time_scale=1.0, horizon_s=100.0)
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(trace))
    read = read_trace(path)  # the project's own reader takes it, and a run config too
    assert read.offline[int(slow)] == [(0.0, 10.0), (60.0, 100.0)]
    config = config_from_dict({"clients": {"count": 2}, "heterogeneity": {"trace": str(path)}})
    model = Heterogeneity(config.heterogeneity, 0, 2)
    assert model.speed_factor(int(slow)) == 4.0
    assert model.hop_s(int(fast), int(slow), 10**6) == pytest.approx(1.0)


def test_the_command_line_writes_the_trace(files, tmp_path):
    out = tmp_path / "trace.json"
    command = [
        sys.executable, "-m", "ring_actors.heterogeneity.fedscale",
        "--capacity", str(files["client_device_capacity"]), "--clients", "3", "--no-links",
        "--out", str(out),
    ]  # fmt: skip
    subprocess.run(command, check=True)
    assert sorted(json.loads(out.read_text())["compute"].values()) == [1.0, 2.0, 4.0]
    config = config_from_dict({"clients": {"count": 3}, "heterogeneity": {"trace": str(out)}})
    assert sorted(Heterogeneity(config.heterogeneity, 0, 3).factors) == [1.0, 2.0, 4.0]


def test_a_pickle_that_is_not_plain_data_is_refused(tmp_path):
    path = tmp_path / "bad"
    path.write_bytes(pickle.dumps({1: {"computation": complex(1, 2)}}))
    with pytest.raises(pickle.UnpicklingError, match="not plain data"):
        read_pickle(path)


def test_asking_for_more_clients_than_can_be_online_says_so():
    with pytest.raises(ValueError, match="3 clients asked, 2 devices described"):
        convert(CAPACITY, BEHAVE, clients=3)


def test_a_horizon_past_the_bound_of_an_off_periods_end_is_refused():
    """The trace it would write could not be read back: its off periods end past the bound."""
    convert(CAPACITY, BEHAVE, clients=2, time_scale=1e5, horizon_s=MAX_RUN_CLOCK_S)
    with pytest.raises(ValueError, match=r"horizon_s in \(0, 3\.1536e\+07\]"):
        convert(CAPACITY, BEHAVE, clients=2, horizon_s=2 * MAX_RUN_CLOCK_S)
