"""Stopping a server process by its own id: SIGTERM, a grace period, then SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess


def stop_process(process: subprocess.Popen, grace_seconds: float = 20.0) -> int | None:
    """Stop `process` (started with start_new_session=True) and return its exit code."""
    if process.poll() is not None:
        return process.returncode
    try:
        os.kill(process.pid, signal.SIGTERM)
        return process.wait(timeout=grace_seconds)
    except subprocess.TimeoutExpired:
        os.kill(process.pid, signal.SIGKILL)
        return process.wait(timeout=10)
    except ProcessLookupError:
        return process.poll()
