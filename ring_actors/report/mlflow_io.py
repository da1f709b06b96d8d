"""Reports and MLflow: runs of an experiment as run directories, and a report as a new run.

MLflow is imported only here and only when called: a report from run directories does not
pay for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ring_actors.report.figures import slug
from ring_actors.storage.run_folder import RunFolder

REPORT_TAG = "ring_actors.report"


def download_experiment(uri: str, experiment: str, directory: Path) -> list[Path]:
    """Each run of ``experiment`` that logged a summary, as a run directory in ``directory``
    (named after the MLflow run); runs without one (reports, crashed drivers) are skipped."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        raise ValueError(f"{uri}: no experiment named {experiment!r}")
    paths = []
    for run in _all_runs(client, found.experiment_id):
        logged = {a.path for a in client.list_artifacts(run.info.run_id)}
        if RunFolder.SUMMARY not in logged:
            continue
        name = f"{slug(run.info.run_name or 'run')}-{run.info.run_id[:8]}"
        target = directory / name
        target.mkdir(parents=True, exist_ok=True)
        for file in RunFolder.PUBLISHED:
            if file in logged:
                client.download_artifacts(run.info.run_id, file, str(target))
        paths.append(target)
    return sorted(paths)


def log_report(uri: str, experiment: str, files: Sequence[Path]) -> str:
    """Log the report's files as the artefacts of a new run; return its id."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(experiment)
    experiment_id = found.experiment_id if found else client.create_experiment(experiment)
    run_id = client.create_run(experiment_id, run_name="report", tags={REPORT_TAG: "1"}).info.run_id
    for file in files:
        client.log_artifact(run_id, str(file))
    client.set_terminated(run_id)
    return run_id


def _all_runs(client, experiment_id: str) -> list:
    runs, token = [], None
    while True:
        page = client.search_runs([experiment_id], max_results=1000, page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            return runs
