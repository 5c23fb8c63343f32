"""Starting a server process in its own session with its output in a log, and stopping it by its own id."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Mapping
from pathlib import Path


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


def spawn_logged(
    command: list[str], log_path: Path, env: Mapping[str, str] | None = None, cwd: Path | str | None = None
) -> subprocess.Popen:
    """Start `command` in its own session (so `stop_process` reaches only it), appending its output to a log."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            command,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
