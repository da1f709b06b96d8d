"""``jobs.train``'s command line run in a fresh interpreter, as a user runs it: what it
printed, and whether it imported Ray (the checks before a run must not)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run(*args: str, expect: int = 0, timeout: float = 120) -> tuple[str, bool]:
    """The command's output (stdout, then stderr), and whether it imported Ray; a run past
    ``timeout`` seconds counts as hung."""
    code = (
        "import sys; from jobs.train import main; code = main(sys.argv[1:]); "
        "print('RAY-IMPORTED' if 'ray' in sys.modules else 'NO-RAY'); sys.exit(code)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == expect, done.stderr[-2000:]
    return done.stdout + done.stderr, "RAY-IMPORTED" in done.stdout
