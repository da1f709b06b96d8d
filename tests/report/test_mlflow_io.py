"""An MLflow experiment's runs come back as run directories; a report is logged as a run."""

from __future__ import annotations

import pytest
from mlflow.tracking import MlflowClient

from ring_actors.coordinator.tracking import Tracker
from ring_actors.report.mlflow_io import REPORT_TAG, download_experiment, log_report
from tests.helpers.run_folders import make_run


@pytest.fixture
def store(tmp_path, mlflow_uri):
    """A real SQLite tracking store whose artefacts stay in ``tmp_path``."""
    uri = mlflow_uri
    client = MlflowClient(tracking_uri=uri)
    for name in ("sweep", "reports"):
        client.create_experiment(name, artifact_location=str(tmp_path / "artifacts" / name))
    return uri, client


def test_runs_that_logged_a_summary_are_downloaded_as_run_directories(tmp_path, store):
    uri, client = store
    for name, seed in (("dfedavg-s0", 0), ("dfedavg-s1", 1)):
        make_run(tmp_path / name, seed=seed, rounds=3)
        tracker = Tracker(uri, "sweep", name)  # what the coordinator logs with
        tracker.log_artifacts(tmp_path / name)
        tracker.end()
    stray = Tracker(uri, "sweep", "crashed-driver")  # a run with no outputs: skipped
    stray.open()
    stray.end()
    paths = download_experiment(uri, "sweep", tmp_path / "downloaded")
    assert [p.name.rsplit("-", 1)[0] for p in paths] == ["dfedavg-s0", "dfedavg-s1"]
    for path in paths:
        original = tmp_path / path.name.rsplit("-", 1)[0]
        for file in ("summary.json", "config.yaml", "metrics.parquet", "events.parquet"):
            assert (path / file).read_bytes() == (original / file).read_bytes()
    with pytest.raises(ValueError, match="no experiment named 'nope'"):
        download_experiment(uri, "nope", tmp_path / "none")


def test_a_report_is_logged_as_the_artefacts_of_a_new_tagged_run(tmp_path, store):
    uri, client = store
    files = [tmp_path / "report.md", tmp_path / "curves.png"]
    files[0].write_text("# Report\n")
    files[1].write_bytes(b"\x89PNG\r\n\x1a\n")
    run_id = log_report(uri, "reports", files)
    run = client.get_run(run_id)
    assert run.info.run_name == "report" and run.info.status == "FINISHED"
    assert run.data.tags[REPORT_TAG] == "1"
    assert sorted(a.path for a in client.list_artifacts(run_id)) == ["curves.png", "report.md"]
    assert download_experiment(uri, "reports", tmp_path / "again") == []  # no summary in it
