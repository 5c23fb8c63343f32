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
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path

from sharp_dagster.servers.ports import free_port
from sharp_dagster.servers.process import LocalServer, log_tail, spawn_logged, stop_process, wait_ready
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


class DagsterDev(LocalServer):
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

        def answers() -> bool:
            with urllib.request.urlopen(f"{self.url}/server_info", timeout=2) as resp:
                if resp.status != 200:
                    raise OSError(f"HTTP {resp.status}")
                return True

        wait_ready(
            answers,
            [("dagster dev", self.process, self.log_path)],
            self.startup_timeout,
            0.5,
            exited_before=f" before {self.url}/server_info answered",
            retry_on=(urllib.error.URLError, OSError),
            failure=lambda last: TimeoutError(
                f"dagster dev on {self.url}: /server_info did not answer in {self.startup_timeout:.0f}s "
                f"({last or 'no answer yet'}):\n{self.log_tail()}"
            ),
        )

    def stop(self) -> int | None:
        """SIGINT to dagster dev (it shuts its children down), then SIGKILL to its process group if needed."""
        process, self.process = self.process, None
        if process is None:
            return None
        # Children still shutting down get a moment; leftovers (a run worker, a stuck code server) share the
        # group and are killed with it.
        return stop_process(process, self.stop_timeout, signal.SIGINT, group=True, group_grace_seconds=5)

    def log_tail(self, chars: int = 4000) -> str:
        return log_tail(self.log_path, chars)

    def __repr__(self) -> str:
        return f"DagsterDev({self.url}, pid={self.pid}, workspace={self.workspace})"
