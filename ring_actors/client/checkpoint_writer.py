"""A client's checkpoint writes, off its round's path where that pays.

Writing and fsyncing a checkpoint takes tens of milliseconds a round, while a GPU client's
round may take less and its host's cores idle. In the background, the round hands a snapshot
to this writer's thread and goes on; at most one write is in flight, and a newer snapshot
replaces one still queued (the newer one covers everything the older one held). A write that
fails is raised on the round's thread at its next hand-over, never swallowed. Inline, a write
runs at once on the caller's thread: where every core trains, a second thread only competes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

Write = Callable[[], None]


class CheckpointWriter:
    """One background thread that runs the newest queued write."""

    def __init__(self, name: str, background: bool = True) -> None:
        self.name = name
        self.background = background
        self.changed = threading.Condition()
        self.queued: Write | None = None
        self.busy = False
        self.error: BaseException | None = None
        self.thread: threading.Thread | None = None

    def submit(self, write: Write) -> None:
        """Queue ``write`` in place of any write not started yet (inline: run it now)."""
        if not self.background:
            write()
            return
        with self.changed:
            self._raise_error()
            self.queued = write
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self.thread.start()
            self.changed.notify_all()

    def flush(self) -> None:
        """Return once every write handed over is on disk (or raise its error)."""
        with self.changed:
            self.changed.wait_for(lambda: self.queued is None and not self.busy)
            self._raise_error()

    def _raise_error(self) -> None:
        error, self.error = self.error, None
        if error is not None:
            raise error

    def _run(self) -> None:
        while True:
            with self.changed:
                self.changed.wait_for(lambda: self.queued is not None)
                write, self.queued, self.busy = self.queued, None, True
            try:
                write()
            except BaseException as err:  # handed to the round's thread
                with self.changed:
                    self.error = err
            finally:
                with self.changed:
                    self.busy = False
                    self.changed.notify_all()
