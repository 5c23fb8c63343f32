"""The one way a local server's process is started, waited for and stopped (every server of `servers/` and the
tests' PostgreSQL).

A server is started with `spawn_logged`: in a session of its own (`start_new_session=True`, so its process group
is its own and a group kill reaches only it and its children), its stdout and stderr appended to a log file.
`wait_ready` polls a readiness probe until it answers, failing early, with the end of the log, when the process
exits first. `stop_process` ends it by its own pid: a polite signal, a grace period, then SIGKILL (to its whole
group when its children must go with it); `kill_process` ends it at once, as a crash would. `LocalServer` is the
`with` form every server shares; `LocalServerInFolder` adds a folder of its own (deleted at the end when this object
made it).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from sharp_dagster.servers.ports import wait_for_port


def java() -> str:
    """The `java` of `JAVA_HOME`, else the one on PATH: what the JVM servers (Kafka, HDFS) run on."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise RuntimeError("the JVM servers (Kafka, HDFS) need `java` (Java 17) on PATH or JAVA_HOME")
    return found


def spawn_logged(
    command: list[str],
    log_path: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | str | None = None,
    **popen_kwargs: Any,
) -> subprocess.Popen:
    """Start `command` in its own session (so `stop_process` reaches only it), appending its output to a log.
    `popen_kwargs` go to `Popen` as they are (`user=`/`group=` to run it as another user)."""
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
            **popen_kwargs,
        )


def log_tail(path: Path, chars: int = 3000) -> str:
    """The end of a server's log, for a failure message."""
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return f"(no log at {path})"


def _exited(what: str, process: subprocess.Popen, log: Path | None = None, before: str = "") -> RuntimeError:
    """The error of a server process that ended while it should have been starting."""
    tail = f":\n{log_tail(log)}" if log is not None else ""
    return RuntimeError(f"{what} (pid {process.pid}) exited with {process.returncode}{before}{tail}")


def wait_port(
    what: str, port: int, process: subprocess.Popen, log: Path, host: str = "127.0.0.1", timeout: float = 60.0
) -> None:
    """Wait until the server listens on `host:port`; else a RuntimeError naming it, with its log's end."""
    try:
        wait_for_port(port, host, timeout=timeout, process=process)
    except (RuntimeError, TimeoutError) as exc:
        raise RuntimeError(f"{what} (pid {process.pid}): {exc}\n{log_tail(log)}") from exc


def wait_ready(
    probe: Callable[[], bool],
    watched: Sequence[tuple[str, subprocess.Popen | None, Path | None]],
    timeout: float,
    interval: float,
    *,
    retry_on: tuple[type[BaseException], ...] = (),
    failure: Callable[[BaseException | None], BaseException],
    exited_before: str = "",
) -> None:
    """Poll `probe()` every `interval` seconds until it returns True; when `timeout` passes first, raise
    `failure(the last exception of retry_on types the probe raised, or None)`.

    Each `(name, process, log)` of `watched` whose process exits meanwhile fails the wait at once with a
    RuntimeError naming it (and `exited_before`: what it did not get to), with the end of its log when there is one.
    """
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while time.monotonic() < deadline:
        for name, process, log in watched:
            if process is not None and process.poll() is not None:
                raise _exited(name, process, log, exited_before)
        try:
            if probe():
                return
        except retry_on as exc:  # the server is not ready yet
            last = exc
        time.sleep(interval)
    raise failure(last)


def stop_process(
    process: subprocess.Popen,
    grace_seconds: float = 20.0,
    stop_signal: int = signal.SIGTERM,
    group: bool = False,
    group_grace_seconds: float = 0.0,
) -> int | None:
    """Stop `process` (started by `spawn_logged`) by its own pid and return its exit code.

    `stop_signal` first, then up to `grace_seconds` for it to end. With `group`, what is left of its process group
    (children it started: executors, a run worker) gets `group_grace_seconds` more, then SIGKILL; without, the
    process itself gets SIGKILL when the grace period ran out.
    """
    if process.poll() is None:
        try:
            os.kill(process.pid, stop_signal)
            process.wait(timeout=grace_seconds)
        except subprocess.TimeoutExpired:
            if not group:
                _kill(process.pid)
        except ProcessLookupError:
            pass
    if group:
        _kill_group(process.pid, group_grace_seconds)  # start_new_session: the group id is the leader's pid
    try:
        return process.wait(timeout=10)
    except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL does not time out in practice
        return None


def kill_process(process: subprocess.Popen, group: bool = False) -> None:
    """End `process` at once (SIGKILL; with `group`, its whole process group), as a crash or a lost machine."""
    if group:
        _kill_group(process.pid, 0.0)
    else:
        _kill(process.pid)
    process.wait(timeout=30)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _kill_group(pgid: int, grace_seconds: float) -> None:
    """SIGKILL to the process group `pgid`, after up to `grace_seconds` for it to end by itself."""
    deadline = time.monotonic() + grace_seconds
    while grace_seconds and _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.2)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class LocalServer:
    """The `with` form every local server shares: `start()` on entry, `cleanup()` on exit (by default `stop()`).
    Subclasses give `start` and `stop`."""

    def start(self):  # pragma: no cover - every server defines it
        raise NotImplementedError

    def stop(self) -> object:  # pragma: no cover - every server defines it
        raise NotImplementedError

    def cleanup(self) -> None:
        self.stop()

    def __enter__(self):
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.cleanup()


class LocalServerInFolder(LocalServer):
    """A local server with a folder of its own: a new temp folder when none is given, deleted by `cleanup()`."""

    def __init__(self, base_dir: str | Path | None, prefix: str):
        self._own_dir = base_dir is None
        self.base_dir = Path(base_dir) if base_dir else Path(tempfile.mkdtemp(prefix=prefix))

    def cleanup(self) -> None:
        """Stop and delete the folder when this object created it."""
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.base_dir, ignore_errors=True)
