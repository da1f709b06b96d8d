"""cluster.yaml against Ray's own cluster-launcher schema, and the security settings it keeps."""

from __future__ import annotations

from pathlib import Path

import jsonschema
import pytest
import ray
import yaml
from ray.autoscaler._private.util import prepare_config, validate_config

CLUSTER_YAML = Path(__file__).resolve().parents[1] / "cluster.yaml"


def load() -> dict:
    return yaml.safe_load(CLUSTER_YAML.read_text())


def test_cluster_yaml_passes_rays_schema():
    validate_config(prepare_config(load()))


def test_the_schema_check_catches_a_misspelt_key():
    config = load()
    config["max_workerz"] = 3
    with pytest.raises(jsonschema.ValidationError):
        validate_config(prepare_config(config))


def test_dashboard_stays_inside_and_auth_stays_on():
    config = load()
    head = " ".join(config["head_start_ray_commands"])
    assert "--dashboard-host=127.0.0.1" in head
    commands = [
        *config["setup_commands"],
        *config["head_start_ray_commands"],
        *config["worker_start_ray_commands"],
    ]
    assert not any("RAY_AUTH_MODE=disabled" in c for c in commands)
    for start in (*config["head_start_ray_commands"], *config["worker_start_ray_commands"]):
        if "ray start" in start:  # every node starts Ray with token authentication
            assert "RAY_AUTH_MODE=token" in start and "RAY_AUTH_TOKEN_PATH" in start
    assert "~/.ray/auth_token" in config["file_mounts"]  # the shared secret reaches each node
    installs = " ".join(config["setup_commands"])
    for package in ("ray[default]==", "torch==", "torchvision==", "mlflow=="):
        assert package in installs  # the stack is pinned
    assert f"ray[default]=={ray.__version__}" in installs  # to what the tests run on
    gpu = config["available_node_types"]["gpu_worker"]
    assert gpu["min_workers"] <= gpu["max_workers"] <= config["max_workers"]
    assert any("pip install -e ." in c for c in config["setup_commands"])
