"""`dagster dev` as a child process: started on a loopback port, waited for, stopped by its own process id.

`dagster dev` starts the webserver, the daemon and a code server as its own children; it runs in a session of its
own (`start_new_session=True`) so the whole tree is one process group that can be killed by that group's id when a
polite SIGINT does not end it in time. The child inherits the environment given here (DAGSTER_HOME,
SHARP_DATA_DIR, ...), and so do the run workers the default run launcher starts.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from sharp_dagster.servers._process import spawn_logged
from sharp_dagster.servers.ports import free_port
from sharp_dagster.settings import REPO_ROOT

DEFAULT_WORKSPACE = REPO_ROOT / "workspace.yaml"

# A process started in the background by a shell inherits SIGINT *ignored*, and `dagster dev` then also ignores
# SIGTERM (it points SIGTERM at the SIGINT handler). This shim restores SIGINT's default before exec'ing dagster,
# so the stop signal works wherever the test runs; exec keeps the pid.
_SIGINT_DEFAULT_SHIM = "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])"


def dagster_command() -> list[str]:
    """The `dagster` CLI of this interpreter's environment (the venv's script, else `python -m dagster`)."""
    script = Path(sys.executable).with_name("dagster")
    return [str(script)] if script.exists() else [sys.executable, "-m", "dagster"]


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


class DagsterDev:
    """`with DagsterDev(env=...) as dev:` serves the UI and GraphQL at `dev.url` until the block ends.

    `env` is the child's whole environment (default: this process's). The log (stdout + stderr) goes to
    `log_path`; `log_tail()` returns its end for failure messages.
    """

    def __init__(
        self,
        workspace: str | Path = DEFAULT_WORKSPACE,
        env: Mapping[str, str] | None = None,
        port: int | None = None,
        host: str = "127.0.0.1",
        log_path: str | Path | None = None,
        cwd: str | Path | None = None,
        startup_timeout: float = 120.0,
        stop_timeout: float = 20.0,
    ):
        self.workspace = Path(workspace)
        self.env = dict(os.environ if env is None else env)
        self.port = port or free_port(host)
        self.host = host
        self.log_path = (
            Path(log_path) if log_path else Path(tempfile.mkdtemp(prefix="sharp_dagster_dev_")) / "dev.log"
        )
        self.cwd = Path(cwd) if cwd else None
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def command(self) -> list[str]:
        return [*dagster_command(), "dev", "-w", str(self.workspace), "-h", self.host, "-p", str(self.port)]

    def _launch_command(self) -> list[str]:
        cmd = self.command()
        return [sys.executable, "-c", _SIGINT_DEFAULT_SHIM, *cmd]

    def start(self) -> DagsterDev:
        if not self.workspace.exists():
            raise FileNotFoundError(f"dagster dev: workspace file not found: {self.workspace}")
        self.process = spawn_logged(self._launch_command(), self.log_path, env=self.env, cwd=self.cwd)
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def wait_ready(self) -> None:
        """Wait until `/server_info` answers 200; fail early (with the log's tail) when the process exits."""
        deadline = time.monotonic() + self.startup_timeout
        last: str = "no answer yet"
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(
                    f"dagster dev (pid {self.process.pid}) exited with {self.process.returncode} before "
                    f"{self.url}/server_info answered:\n{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(f"{self.url}/server_info", timeout=2) as resp:
                    if resp.status == 200:
                        return
                    last = f"HTTP {resp.status}"
            except (urllib.error.URLError, OSError) as exc:
                last = str(exc)
            time.sleep(0.5)
        raise TimeoutError(
            f"dagster dev on {self.url}: /server_info did not answer in {self.startup_timeout:.0f}s ({last}):\n"
            f"{self.log_tail()}"
        )

    def stop(self) -> int | None:
        """SIGINT to dagster dev (it shuts its children down), then SIGKILL to its process group if needed."""
        process, self.process = self.process, None
        if process is None:
            return None
        pgid = process.pid  # start_new_session: the group id is the leader's pid
        if process.poll() is None:
            try:
                os.kill(process.pid, signal.SIGINT)
                process.wait(timeout=self.stop_timeout)
            except subprocess.TimeoutExpired:
                pass
            except ProcessLookupError:
                pass
        # Children still shutting down get a moment; leftovers (a run worker, a stuck code server) share the
        # group and are killed with it.
        deadline = time.monotonic() + 5
        while _group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if _group_alive(pgid):
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            return process.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL does not time out in practice
            return None

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return f"(no log at {self.log_path})"

    def __enter__(self) -> DagsterDev:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"DagsterDev({self.url}, pid={self.pid}, workspace={self.workspace})"
