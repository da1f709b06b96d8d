"""How a run meets Ctrl-C and SIGTERM: alike, its outputs written and resumable; twice, at
once; never while its actors are killed or Ray shuts down, which an interrupt would leave half
done (a traceback, and in Ray's own shutdown a crash of the interpreter)."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import ray


class RunInterrupted(RuntimeError):
    """Interrupted again while the first interrupt's outputs were being written: the run
    ends at once, its folder as the coordinator last wrote it (resumable)."""


def _stop_as_ctrl_c(signum: int, frame: FrameType | None) -> None:
    """SIGTERM (``kill``, a batch scheduler, ``ray job stop``, a container's stop) stops a
    run as Ctrl-C does: its outputs written, resumable."""
    raise KeyboardInterrupt


@contextmanager
def _signal_handlers(handlers: dict[signal.Signals, Any]) -> Iterator[None]:
    """``handlers`` in place within, the previous ones back after; in the main thread only,
    the one Python lets set them."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, handler) for signum, handler in handlers.items()}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def sigterm_as_ctrl_c() -> contextlib.AbstractContextManager[None]:
    """Within, SIGTERM stops the run as Ctrl-C does."""
    return _signal_handlers({signal.SIGTERM: _stop_as_ctrl_c})


@contextmanager
def signals_held() -> Iterator[None]:
    """Ctrl-C and SIGTERM ignored within: for the steps that end a run (its actors killed,
    Ray shut down), which an interrupt would leave half done, with a traceback and, in Ray's
    own shutdown, a crash of the interpreter."""
    with _signal_handlers({signal.SIGINT: signal.SIG_IGN, signal.SIGTERM: signal.SIG_IGN}):
        yield


@contextmanager
def ray_session() -> Iterator[None]:
    """A command's use of Ray: a Ray that starts within is shut down on the way out, signals
    held, instead of by Ray's exit hook, where a second Ctrl-C crashes the interpreter."""
    started_here = not ray.is_initialized()
    try:
        yield
    finally:
        if started_here and ray.is_initialized():
            with signals_held():
                ray.shutdown()


def take_sigterm_back(before: Any) -> None:
    """SIGTERM handled from Python again, as before ``ray.init``.

    ray.init sets a handler of its own (an exit through its atexit shutdown), and then its
    native failure handler takes SIGTERM as a crash: a native stack dump, and the driver
    gone before it stops the run. Set again from Python, the caller's handler (Ray's where
    the caller had none) takes SIGTERM; the native handler keeps the crash signals.
    """
    if threading.current_thread() is threading.main_thread():
        handler = signal.getsignal(signal.SIGTERM) if before == signal.SIG_DFL else before
        signal.signal(signal.SIGTERM, handler)
