"""MLflow logging through a writer thread, and the run's output files (the output contract)."""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ring_actors.storage.redact import redact_text, redact_uri
from ring_actors.storage.run_folder import RunFolder
from ring_actors.timeouts import TRACKING_CLOSE_S, TRACKING_REQUEST_S

log = logging.getLogger(__name__)

_MAX_BATCH = 1000  # MLflow's limit on metrics per log_batch call


def resolve_tracking_uri(configured: str | None, workdir: Path) -> str:
    """Config value, else ``MLFLOW_TRACKING_URI``, else a SQLite file in ``workdir``."""
    uri = configured or os.environ.get("MLFLOW_TRACKING_URI")
    return uri or f"sqlite:///{(workdir / 'mlflow.db').resolve()}"


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested config as dotted keys with string values, the shape MLflow params take."""
    flat: dict[str, str] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = json.dumps(value) if isinstance(value, (list, tuple)) else str(value)
    return flat


@dataclass(frozen=True)
class Retry:
    """How the writer treats a tracking server that does not answer.

    MLflow's own HTTP client retries one request for minutes by default; the writer asks it
    for one short try instead and retries itself, with backoff, so an outage costs the run
    nothing but a delay in what MLflow shows.
    """

    every_s: float = 1.0  # buffered metrics go out at most this often
    first_backoff_s: float = 0.5  # after a failure; doubled on each failure that follows
    max_backoff_s: float = 30.0
    open_wait_s: float = 60.0  # ``open`` waits at most this long for the writer's first try
    close_s: float = TRACKING_CLOSE_S  # ``end`` retries this long, then writes the unsent file
    request_timeout_s: int = (
        TRACKING_REQUEST_S  # MLFLOW_HTTP_REQUEST_TIMEOUT, unless the environment sets it
    )
    request_retries: int = 0  # MLFLOW_HTTP_REQUEST_MAX_RETRIES, unless the environment sets it


Row = tuple[str, float, int, int]  # key, value, timestamp in ms, step: an MLflow metric


class Tracker:
    """One MLflow run, written only by the coordinator, through a writer thread of its own.

    Callers only queue work and never wait on MLflow: ``add_metrics`` appends to a buffer,
    ``flush`` wakes the writer, ``log_artifacts`` lists files to upload. The writer creates
    the run, sends metrics in batches and uploads. A batch leaves the buffer only once MLflow
    took it, so a tracking server that goes away loses nothing and is sent the rest when it
    is back; MLflow's store ignores a metric it already holds, so a batch sent again after
    an answer got lost is not doubled. ``end`` waits for the writer a bounded time and
    writes what is still unsent to ``unsent_metrics.jsonl`` in the output directory.

    Nothing touches MLflow until ``open``: importing it and creating a SQLite store take
    seconds, which the coordinator spends on a thread of its own while the ring starts.
    """

    def __init__(
        self,
        uri: str,
        experiment: str,
        run_name: str,
        run_id: str | None = None,
        output_dir: Path | None = None,
        retry: Retry = Retry(),
    ) -> None:
        """A new run, or with ``run_id`` the same run again (after a coordinator restart).
        ``output_dir`` keeps the unsent metrics; without it, the directory uploaded does."""
        self.uri = uri
        self.public_uri = redact_uri(uri)  # what logs show
        self.experiment = experiment
        self.run_name = run_name
        self.run_id = run_id
        self.output_dir = output_dir
        self.retry = retry
        self.client = None  # the writer's MlflowClient: only the writer thread uses it
        self.unsent_path: Path | None = None
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # the writer finished a pass
        self._pending: list[Row] = []  # appended by callers, taken from the front by the writer
        self._refused: list[Row] = []  # rows MLflow rejected: sending them again cannot help
        self._uploads: list[Path] = []
        self._describe: tuple[dict[str, str], dict[str, str]] | None = None  # a new run's
        self._ready = False  # the run exists, with its params and tags
        self._status: str | None = None  # set by ``end``: the writer closes the run with it
        self._deadline = math.inf  # after ``end``: when the writer stops retrying
        self._wake = threading.Event()  # send now
        self._hurry = threading.Event()  # ``end`` came: stop backing off
        self._tried = threading.Event()  # the writer's first pass is over
        self._writer: threading.Thread | None = None
        self._abandoned = False  # ``end`` stopped waiting and wrote the unsent file itself

    def open(
        self, params: Mapping[str, str] | None = None, tags: Mapping[str, str] | None = None
    ) -> bool:
        """Start the writer, which connects and creates the run (with ``params`` and
        ``tags``) if it is new; wait for its first try, ``retry.open_wait_s`` at most.
        True once the run is there; if it is not, the writer keeps trying."""
        with self._lock:
            if self._writer is None:
                if self.run_id is None:
                    self._describe = (
                        {k: v[:6000] for k, v in (params or {}).items()},
                        {k: str(v) for k, v in (tags or {}).items()},
                    )
                self._writer = threading.Thread(target=self._write, name="mlflow", daemon=True)
                self._writer.start()
        self._tried.wait(self.retry.open_wait_s)
        return self._ready

    def add_metrics(self, values: Mapping[str, float], step: int) -> None:
        """Buffer ``values`` at ``step``; returns at once, whatever MLflow is doing."""
        now = int(time.time() * 1000)
        with self._lock:
            self._pending.extend((k, float(v), now, step) for k, v in values.items())

    def unsent(self) -> list[Row]:
        """The metrics queued and not yet taken by MLflow, for a checkpoint."""
        with self._lock:
            return self._refused + self._pending

    def requeue(self, rows: list[Row]) -> None:
        """Queue ``rows`` (from a checkpoint) again, timestamps and all, ahead of new ones."""
        with self._lock:
            self._pending[:0] = [tuple(row) for row in rows]

    def flush(self, wait_s: float = 0.0) -> bool:
        """Ask the writer to send what is buffered now, and wait ``wait_s`` at most for it.
        Never raises: True when the run is open and nothing is left to send or upload."""
        self._wake.set()
        deadline = time.monotonic() + wait_s
        with self._changed:
            while not (self._ready and not self._pending and not self._uploads):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
            return True

    def log_artifacts(self, directory: Path, private: tuple[str, ...] = ()) -> None:
        """Queue ``directory``'s entries for upload, leaving out those named in ``private``
        and an interrupted atomic write of one (``<name>.tmp``)."""
        entries = [
            entry
            for entry in sorted(directory.iterdir())
            if entry.name not in private and entry.name.removesuffix(".tmp") not in private
        ]
        with self._lock:
            self.output_dir = self.output_dir or directory
            self._uploads.extend(entries)
        self.open()
        self._wake.set()

    def end(self, status: str = "FINISHED") -> Path | None:
        """Send and upload everything, then mark the run ``status``; retry ``retry.close_s``
        at most, then write what is left to the unsent file, whose path is returned."""
        self.open()
        with self._lock:
            if self._status is None:
                self._status = status
                self._deadline = time.monotonic() + self.retry.close_s
        self._hurry.set()
        self._wake.set()
        # The last request may take its whole timeout, once per MLflow retry.
        request_s = self.retry.request_timeout_s * (self.retry.request_retries + 1)
        self._writer.join(self.retry.close_s + request_s + 5.0)
        if self._writer.is_alive():  # stuck in a request: what it holds goes to the file now
            with self._lock:
                self._abandoned = True
                rows = self._refused + self._pending
            path = self._write_unsent(rows) if rows else None
            log.warning(
                "MLflow at %s: a request is still under way at the end; %d metrics%s",
                self.public_uri,
                len(rows),
                f" written to {path}" if path else "",
            )
        return self.unsent_path

    # ---- the writer thread --------------------------------------------------------------

    def _write(self) -> None:
        """Passes until the run is ended: every ``retry.every_s`` or when woken, and after
        a failure with backoff, until ``end``'s deadline."""
        _short_http_requests(self.retry)
        backoff = 0.0
        while True:
            failure: Exception | None = None
            try:
                ended = self._write_pass()
            except Exception as err:  # the server, or the network: tried again later
                failure, ended = err, False
            finally:
                self._tried.set()
                with self._changed:
                    self._changed.notify_all()
            if ended:
                return
            if failure is None:
                if backoff:
                    log.info("MLflow at %s answers again; buffered metrics sent", self.public_uri)
                backoff = 0.0
                self._wake.wait(self.retry.every_s)
                self._wake.clear()
                continue
            # A missing MLflow package is not an outage: no retry can end it.
            missing = isinstance(failure, ImportError)
            if time.monotonic() >= self._deadline or (missing and self._status is not None):
                self._give_up(failure)
                return
            if not backoff:
                log.warning(
                    "MLflow %s (%s); metrics stay buffered, %s",
                    "is not installed" if missing else f"at {self.public_uri} is not answering",
                    redact_text(repr(failure), self.uri),
                    "for the unsent file" if missing else "retrying",
                )
            backoff = min(max(2 * backoff, self.retry.first_backoff_s), self.retry.max_backoff_s)
            self._hurry.wait(min(backoff, max(0.0, self._deadline - time.monotonic())))
            self._hurry.clear()

    def _write_pass(self) -> bool:
        """The run, the buffered metrics, the uploads, then the end if asked for; True once
        the run is ended. Raises when MLflow does not answer; nothing is lost then."""
        from mlflow.entities import Metric
        from mlflow.tracking import MlflowClient

        if self.client is None:
            create_sqlite_store(self.uri)
            self.client = MlflowClient(tracking_uri=self.uri)
        if not self._ready:
            self._create_run()
        while True:
            with self._lock:
                batch = self._pending[:_MAX_BATCH]
            if not batch:
                break
            try:
                self.client.log_batch(self.run_id, metrics=[Metric(*row) for row in batch])
            except Exception as err:
                if not _refused(err):
                    raise
                log.error(
                    "MLflow refused %d metrics (%s); kept for the unsent file",
                    len(batch),
                    redact_text(str(err), self.uri),
                )
                self._refused.extend(batch)
            with self._lock:
                del self._pending[: len(batch)]
        while True:
            with self._lock:
                entry = self._uploads[0] if self._uploads else None
            if entry is None:
                break
            if entry.is_dir():
                self.client.log_artifacts(self.run_id, str(entry), artifact_path=entry.name)
            elif entry.exists():
                self.client.log_artifact(self.run_id, str(entry))
            with self._lock:
                self._uploads.pop(0)
        with self._lock:
            status = self._status
        if status is None:
            return False
        self.client.set_terminated(self.run_id, status=status)
        with self._lock:
            abandoned = self._abandoned
        if self._refused and not abandoned:
            self._write_unsent(self._refused)
        return True

    def _create_run(self) -> None:
        """Create the run and log its params and tags, or take up ``run_id``'s; a step that
        succeeded is not repeated when a later one fails."""
        from mlflow.entities import Param, RunTag

        if self.run_id is None:
            found = self.client.get_experiment_by_name(self.experiment)
            experiment_id = (
                found.experiment_id if found else self.client.create_experiment(self.experiment)
            )
            self.run_id = self.client.create_run(experiment_id, run_name=self.run_name).info.run_id
        if self._describe is not None:
            params, tags = self._describe
            items = [Param(k, v) for k, v in params.items()]
            for start in range(0, len(items), 100):
                self.client.log_batch(self.run_id, params=items[start : start + 100])
            if tags:
                self.client.log_batch(self.run_id, tags=[RunTag(k, v) for k, v in tags.items()])
            self._describe = None
        self._ready = True

    def _give_up(self, failure: Exception) -> None:
        """``end``'s deadline passed with MLflow still not answering: keep the metrics in
        the unsent file and say what did not reach MLflow."""
        with self._lock:
            rows = self._refused + self._pending
            self._pending.clear()
            uploads = len(self._uploads)
        with self._lock:
            if self._abandoned:  # ``end`` wrote them already
                return
        path = self._write_unsent(rows) if rows else None
        log.warning(
            "MLflow at %s %s (%s): %d metrics%s; %d output entries not uploaded (they are in %s)%s",
            self.public_uri,
            "is not installed"
            if isinstance(failure, ImportError)
            else f"did not answer within {self.retry.close_s:.0f} s of the end",
            redact_text(repr(failure), self.uri),
            len(rows),
            f" written to {path}" if path else "",
            uploads,
            self.output_dir,
            "" if self._ready else "; the run itself was never created",
        )

    def _write_unsent(self, rows: list[Row]) -> Path | None:
        """Append ``rows`` to the unsent file, one JSON object each (with the run they
        belong to), for sending later; None when there is no output directory."""
        if self.output_dir is None:
            log.error(
                "%d metrics not sent to MLflow and no output directory to keep them", len(rows)
            )
            return None
        path = RunFolder(self.output_dir).unsent_metrics
        with path.open("a") as file:
            for key, value, timestamp, step in rows:
                record = {"run_id": self.run_id, "key": key, "value": value}
                file.write(json.dumps({**record, "timestamp": timestamp, "step": step}) + "\n")
        self.unsent_path = path
        return path


def create_sqlite_store(uri: str) -> None:
    """Create a missing SQLite store whole or not at all: MLflow builds its tables one by one,
    and a process killed halfway leaves a file that MLflow then refuses to open. The tables
    are built in a file of this process's own and linked into place, which fails harmlessly
    if another run got there first."""
    if not uri.startswith("sqlite:///"):
        return
    path = Path(uri.removeprefix("sqlite:///"))
    if path.exists():
        return
    from mlflow.tracking import MlflowClient

    path.parent.mkdir(parents=True, exist_ok=True)
    draft = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")
    draft.unlink(missing_ok=True)
    MlflowClient(tracking_uri=f"sqlite:///{draft}")  # builds every table, then commits
    try:
        os.link(draft, path)
    except FileExistsError:
        pass
    finally:
        draft.unlink()


def _short_http_requests(retry: Retry) -> None:
    """One short try per MLflow request, unless the environment already says otherwise.
    Process-wide: in the coordinator's process the writer is MLflow's only user."""
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", str(retry.request_timeout_s))
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", str(retry.request_retries))


def _refused(err: Exception) -> bool:
    """MLflow answered no to the request itself (a 4xx other than a timeout or a rate
    limit): sending the same again cannot help."""
    from mlflow.exceptions import MlflowException

    if not isinstance(err, MlflowException):
        return False
    status = err.get_http_status_code()
    return 400 <= status < 500 and status not in (408, 429)
