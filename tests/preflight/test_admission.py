"""The memory admission check: measured figures against what this node has available."""

from __future__ import annotations

import pytest
import ray

from ring_actors.preflight.admission import (
    CLIENT_GB,
    CLIENT_GB_CPU_BUILD,
    CONTROL_PLANE_GB,
    AdmissionError,
    NodeMemory,
    check_memory,
    client_gb,
    need_gb,
    node_memory,
    torch_has_cuda,
)
from ring_actors.runtime.driver import launch
from tests.conftest import small_config


def test_the_need_grows_with_every_client_joiners_included(tmp_path):
    config = small_config(tmp_path, "clients.count=10", "clients.reserve=2")
    assert need_gb(config) == pytest.approx(12 * client_gb(config) + CONTROL_PLANE_GB)
    # A larger backbone adds four copies of the parameters it has beyond the small CNN.
    resnet = small_config(tmp_path, "algorithm.backbone=resnet18")
    assert 0.1 < client_gb(resnet) - client_gb(config) < 0.2


def test_a_plan_past_the_memory_monitor_is_refused_with_what_to_change(tmp_path):
    config = small_config(tmp_path, "clients.count=60")  # 60 x 0.30 (or 0.42) + 1.9 GB
    memory = NodeMemory(available_gb=20.0, total_gb=24.0)  # 18.8 GB usable at Ray's 95%
    with pytest.raises(AdmissionError) as caught:
        check_memory(config, memory)
    message = str(caught.value)
    fits = int((memory.usable_gb - CONTROL_PLANE_GB) // client_gb(config))
    need = f"{need_gb(config):.1f} GB"
    for part in ("60 clients", need, "20.0 GB available of 24.0 GB", f"About {fits} clients"):
        assert part in message
    assert "clients.count" in message and "ray.address" in message
    check_memory(small_config(tmp_path, f"clients.count={fits}"), memory)
    check_memory(config, None)  # no /proc/meminfo: nothing to compare with


def test_the_torch_build_is_read_from_its_files(tmp_path):
    (tmp_path / "cuda" / "lib").mkdir(parents=True)
    (tmp_path / "cuda" / "lib" / "libtorch_cuda.so").touch()
    (tmp_path / "cpu" / "lib").mkdir(parents=True)
    (tmp_path / "cpu" / "lib" / "libtorch_cpu.so").touch()
    assert torch_has_cuda(tmp_path / "cuda")
    assert not torch_has_cuda(tmp_path / "cpu")


def test_a_cpu_build_of_torch_is_counted_with_its_own_figure(tmp_path):
    config = small_config(tmp_path)
    assert client_gb(config, cuda_build=True) == CLIENT_GB
    assert client_gb(config, cuda_build=False) == CLIENT_GB_CPU_BUILD < CLIENT_GB


def test_this_node_reports_its_memory():
    memory = node_memory()
    assert memory is not None and 0 < memory.available_gb <= memory.total_gb


def test_launch_refuses_before_ray_or_any_actor_starts(tmp_path, no_ray):
    memory = node_memory()
    assert memory is not None
    per_client = client_gb(small_config(tmp_path))
    count = int(memory.total_gb / per_client) + 10  # more than the whole node could hold
    config = small_config(tmp_path, f"clients.count={count}")
    with pytest.raises(AdmissionError, match=f"not enough memory on this node for {count}"):
        launch(config, tmp_path / "out")
    assert not ray.is_initialized()  # no Ray, so no actor, was started
    assert not (tmp_path / "out").exists()
