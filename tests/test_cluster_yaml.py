"""cluster.yaml against Ray's own cluster-launcher schema, and the security settings it keeps."""

from __future__ import annotations

import shlex
from importlib.metadata import version
from pathlib import Path

import jsonschema
import pytest
import ray
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from ray.autoscaler._private.util import prepare_config, validate_config

ROOT = Path(__file__).resolve().parents[1]
CLUSTER_YAML = ROOT / "cluster.yaml"
PYPROJECT = ROOT / "pyproject.toml"


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
            ray_start = start.index("ray start")
            assert -1 < start.find("RAY_AUTH_MODE=token ") < ray_start, start
            assert -1 < start.find("RAY_AUTH_TOKEN_PATH=~/.ray/auth_token ") < ray_start, start
    assert "~/.ray/auth_token" in config["file_mounts"]  # the shared secret reaches each node
    gpu = config["available_node_types"]["gpu_worker"]
    assert gpu["min_workers"] <= gpu["max_workers"] <= config["max_workers"]


def test_every_dependency_is_pinned_to_the_version_the_tests_run_on():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11 on
    setup = load()["setup_commands"]
    pins = {}
    for command in setup:
        for word in shlex.split(command):
            if "==" in word:
                requirement = Requirement(word)
                pins[canonicalize_name(requirement.name)] = (
                    requirement,
                    str(requirement.specifier),
                )
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    for line in project["dependencies"]:
        declared = Requirement(line)
        pinned, specifier = pins[canonicalize_name(declared.name)]
        assert specifier == f"=={version(declared.name)}", declared.name
        assert pinned.extras == declared.extras, declared.name  # ray[default] stays ray[default]
        assert declared.specifier.contains(version(declared.name))
    assert specifier  # the loop ran
    assert pins["ray"][1] == f"=={ray.__version__}"
    # The project goes in last and brings nothing unpinned with it.
    assert setup[-1].endswith("pip install --no-deps -e .")
    assert all("--upgrade" not in c and "-U " not in c for c in setup)


def test_the_nodes_open_ssh_only_to_one_address_in_a_declared_security_group():
    group = load()["provider"]["security_group"]
    assert group["GroupName"]
    (rule,) = group["IpPermissions"]  # Ray adds only the rule between the group's own nodes
    assert (rule["IpProtocol"], rule["FromPort"], rule["ToPort"]) == ("tcp", 22, 22)
    for cidr in rule["IpRanges"]:
        assert cidr["CidrIp"].endswith("/32") and cidr["CidrIp"] != "0.0.0.0/32"


def test_secrets_and_history_stay_home_and_stopped_nodes_keep_no_disks():
    config = load()
    excluded = config["rsync_exclude"]
    assert ".git" in excluded and ".env" in excluded and "**/.env" in excluded
    assert config["provider"]["cache_stopped_nodes"] is False  # their disks held checkpoints


def test_the_shared_storage_limitation_is_stated():
    text = CLUSTER_YAML.read_text()
    assert "shared storage" in text and "--output-dir" in text
