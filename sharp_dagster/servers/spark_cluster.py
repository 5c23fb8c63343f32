"""A Spark standalone cluster on this machine: one master and one or more workers from the pyspark install.

All run through `$SPARK_HOME/bin/spark-class` (SPARK_HOME = the pyspark package folder) on free loopback ports,
each in a session of its own, with logs in a temp folder (never inside the pyspark package). Each worker has its
own work folder (`worker-N/work`, its executors' folders) and local folder (`worker-N/local`, their shuffle and
spill files), as separate machines would. The cluster is ready when the master's web UI JSON (`/json`) lists every
worker as ALIVE. Stopping sends SIGTERM to each by its own pid (the workers first: a worker's shutdown kills its
executors), then SIGKILL to what is left of its process group. `kill_worker(i)` ends one worker and its executors
at once, as a lost machine would.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyspark

from sharp_dagster.servers.ports import free_port
from sharp_dagster.servers.process import (
    LocalServerInFolder,
    kill_process,
    log_tail,
    spawn_logged,
    stop_process,
    wait_port,
    wait_ready,
)


def pyspark_home() -> Path:
    """The pyspark package folder, which carries `bin/spark-class` and `jars/`."""

    return Path(pyspark.__file__).resolve().parent


class SparkStandaloneCluster(LocalServerInFolder):
    """`with SparkStandaloneCluster() as cluster:`; sessions connect to `cluster.master_url`.

    `cores` and `memory` are what each of the `workers` offers to executors; `daemon_memory` is the heap of the
    master and worker JVMs themselves.
    """

    def __init__(
        self,
        base_dir: str | Path | None = None,
        cores: int = 1,
        memory: str = "1g",
        host: str = "127.0.0.1",
        daemon_memory: str = "256m",
        spark_home: str | Path | None = None,
        extra_env: Mapping[str, str] | None = None,
        startup_timeout: float = 90.0,
        workers: int = 1,
    ):
        super().__init__(base_dir, "sharp_spark_cluster_")
        self.cores = cores
        self.memory = memory
        self.host = host
        self.daemon_memory = daemon_memory
        self.spark_home = Path(spark_home) if spark_home else pyspark_home()
        self.extra_env = dict(extra_env or {})
        self.startup_timeout = startup_timeout
        self.master_port = free_port(host)
        self.master_webui_port = free_port(host)
        self.worker_ports = [
            (free_port(host), free_port(host)) for _ in range(workers)
        ]  # (port, web UI port)
        self.master: subprocess.Popen | None = None
        self.workers: list[subprocess.Popen | None] = [None] * workers

    # ------------------------------------------------------------------ addresses
    @property
    def master_url(self) -> str:
        return f"spark://{self.host}:{self.master_port}"

    @property
    def webui_url(self) -> str:
        return f"http://{self.host}:{self.master_webui_port}"

    @property
    def master_log(self) -> Path:
        return self.base_dir / "master.log"

    def worker_dir(self, index: int) -> Path:
        return self.base_dir / f"worker-{index}"

    def worker_log(self, index: int = 0) -> Path:
        return self.worker_dir(index) / "worker.log"

    @property
    def pids(self) -> dict[str, int | None]:
        found = {"master": self.master.pid if self.master else None}
        found.update({f"worker-{i}": w.pid if w else None for i, w in enumerate(self.workers)})
        return found

    # ------------------------------------------------------------------ lifecycle
    def _env(self, local_dir: Path | None = None) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            {
                "SPARK_HOME": str(self.spark_home),
                "SPARK_DAEMON_MEMORY": self.daemon_memory,
                "SPARK_LOG_DIR": str(self.base_dir / "logs"),
                "SPARK_LOCAL_DIRS": str(local_dir or self.base_dir / "local"),
                # No conf/ of the machine's Spark (if any) leaks into this cluster.
                "SPARK_CONF_DIR": str(self.base_dir / "conf"),
                "SPARK_LOCAL_IP": self.host,
            }
        )
        env.update(self.extra_env)
        return env

    def _spawn(
        self, cls: str, args: list[str], log_path: Path, local_dir: Path | None = None
    ) -> subprocess.Popen:
        spark_class = self.spark_home / "bin" / "spark-class"
        if not spark_class.exists():
            raise FileNotFoundError(f"spark-class not found under SPARK_HOME {self.spark_home}")
        env = self._env(local_dir)
        return spawn_logged([str(spark_class), cls, *args], log_path, env=env, cwd=self.base_dir)

    def _start_worker(self, index: int) -> subprocess.Popen:
        folder = self.worker_dir(index)
        for sub in ("local", "work"):
            (folder / sub).mkdir(parents=True, exist_ok=True)
        port, webui_port = self.worker_ports[index]
        return self._spawn(
            "org.apache.spark.deploy.worker.Worker",
            [
                self.master_url,
                "--host", self.host,
                "--port", str(port),
                "--webui-port", str(webui_port),
                "--cores", str(self.cores),
                "--memory", self.memory,
                "--work-dir", str(folder / "work"),
            ],
            self.worker_log(index),
            local_dir=folder / "local",
        )  # fmt: skip

    def start(self) -> SparkStandaloneCluster:
        for sub in ("logs", "local", "conf"):
            (self.base_dir / sub).mkdir(parents=True, exist_ok=True)
        try:
            self.master = self._spawn(
                "org.apache.spark.deploy.master.Master",
                [
                    "--host",
                    self.host,
                    "--port",
                    str(self.master_port),
                    "--webui-port",
                    str(self.master_webui_port),
                ],
                self.master_log,
            )
            self._wait_port(self.master_port, self.master, self.master_log)
            self._wait_port(self.master_webui_port, self.master, self.master_log)
            for index in range(len(self.workers)):
                self.workers[index] = self._start_worker(index)
            self._wait_workers()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_port(self, port: int, process: subprocess.Popen, log: Path) -> None:
        wait_port("Spark daemon", port, process, log, self.host, self.startup_timeout)

    def _wait_workers(self) -> None:
        wait_ready(
            lambda: self.alive_workers() >= len(self.workers),
            [(f"Spark worker {i}", worker, self.worker_log(i)) for i, worker in enumerate(self.workers)],
            self.startup_timeout,
            0.5,
            retry_on=(urllib.error.URLError, OSError, ValueError),
            failure=lambda _: TimeoutError(
                f"not all {len(self.workers)} workers registered with {self.master_url} in "
                f"{self.startup_timeout:.0f}s:\n{self.logs()}"
            ),
        )

    def kill_worker(self, index: int) -> None:
        """End worker `index` and its executors at once (SIGKILL to its process group), as a lost machine."""
        worker = self.workers[index]
        if worker is None:
            return
        kill_process(worker, group=True)
        self.workers[index] = None

    def stop(self) -> None:
        """Stop the workers, then the master, each by its own pid."""
        # Then SIGKILL to what is left of each one's group: its executors, or a JVM that ignored SIGTERM.
        for index, worker in enumerate(self.workers):
            if worker is not None:
                stop_process(worker, grace_seconds=15, group=True)
                self.workers[index] = None
        if self.master is not None:
            stop_process(self.master, grace_seconds=15, group=True)
            self.master = None

    # ------------------------------------------------------------------ status
    def status(self) -> dict[str, Any]:
        """The master's state as its web UI serves it at `/json` (workers, activeapps, completedapps, ...)."""
        with urllib.request.urlopen(f"{self.webui_url}/json", timeout=5) as resp:
            return json.loads(resp.read().decode("utf-8"))

    def alive_workers(self) -> int:
        state = self.status()
        if "aliveworkers" in state:
            return int(state["aliveworkers"])
        return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")

    def applications(self) -> list[dict[str, Any]]:
        """Every application the master knows, running or finished."""
        state = self.status()
        return [*state.get("activeapps", []), *state.get("completedapps", [])]

    def logs(self, chars: int = 3000) -> str:
        parts = [f"--- master\n{self._tail(self.master_log, chars)}"]
        for index in range(len(self.workers)):
            parts.append(f"--- worker {index}\n{self._tail(self.worker_log(index), chars)}")
        return "\n".join(parts)

    @staticmethod
    def _tail(path: Path, chars: int = 3000) -> str:
        return log_tail(path, chars)

    def __repr__(self) -> str:
        return f"SparkStandaloneCluster({self.master_url}, ui={self.webui_url}, pids={self.pids})"
