"""A tracking URI's credentials are written nowhere: not in the outputs, the MLflow
parameters, the summary, nor the warnings."""

from __future__ import annotations

import json
import logging
import socket

import pytest

from ring_actors.config import config_from_dict
from ring_actors.coordinator.core import CoordinatorCore
from ring_actors.coordinator.tracking import Retry, Tracker, flatten
from ring_actors.storage.redact import redact_uri

SECRET = "s3cr3t-t0ken"


@pytest.mark.parametrize(
    ("uri", "shown"),
    [
        (f"https://alice:{SECRET}@mlflow.example.org/x", "https://***@mlflow.example.org/x"),
        (f"http://{SECRET}@10.0.0.1:5000", "http://***@10.0.0.1:5000"),
        (f"https://h.org/?token={SECRET}&a=1", "https://h.org/?token=%2A%2A%2A&a=1"),
        ("sqlite:////tmp/mlflow.db", "sqlite:////tmp/mlflow.db"),
        ("databricks", "databricks"),
    ],
)
def test_credentials_in_a_uri_are_hidden_and_the_rest_kept(uri, shown):
    assert redact_uri(uri) == shown


def test_a_secret_uri_appears_in_no_output_param_summary_or_warning(tmp_path, caplog):
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        uri = f"http://alice:{SECRET}@127.0.0.1:{sock.getsockname()[1]}"
    config = config_from_dict({"clients": {"count": 2}, "tracking": {"uri": uri}})
    tracker = Tracker(uri, "t", "run", output_dir=tmp_path, retry=Retry(close_s=0.5))
    core = CoordinatorCore(config, tmp_path, tracker)
    core.rows.append({"client": 0, "round": 0, "time_s": 0.0, "local_acc": 0.5})
    with caplog.at_level(logging.INFO):
        core.outputs.write_partial()
        core.open_tracking()
        tracker.end()
    written = "".join(p.read_text(errors="replace") for p in tmp_path.iterdir() if p.is_file())
    assert SECRET not in written and "alice" not in written
    assert json.loads((tmp_path / "summary.json").read_text())["mlflow"]["tracking_uri"]
    assert SECRET not in caplog.text and "***@127.0.0.1" in caplog.text
    params = tracker._describe[0] if tracker._describe else {}
    assert not [v for v in params.values() if SECRET in v]
    assert SECRET not in json.dumps(flatten(core.public_config()))
