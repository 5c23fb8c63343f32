"""A local Apache Kafka broker (KRaft mode, one node, log dirs on disk) for tests and the demo.

The broker is `kafka.Kafka` from the jars that `jvm/pom.xml` pins and the bootstrap copies with Maven
(`sharp_dagster.jvm`), started with `java` on loopback and stopped by its own process id. Topics, messages and
committed offsets live in `log.dirs` under `base_dir`, so a broker stopped (or killed) and started again on the
same `base_dir` serves what it had acknowledged. Production points at a real Kafka cluster by configuration
(`SHARP_KAFKA_BOOTSTRAP`) instead.
"""

from __future__ import annotations

import base64
import subprocess
import time
import uuid
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from sharp_dagster import jvm
from sharp_dagster.servers.ports import free_port, wait_for_port
from sharp_dagster.servers.process import (
    LocalServerInFolder,
    java,
    kill_process,
    spawn_logged,
    stop_process,
    wait_ready,
)

LOG4J_CONF = Path(__file__).with_name("kafka_log4j2.properties")
# One small, short-lived broker: these machines run it beside Spark, Dagster and a database, and the tests start
# dozens. HotSpot's C1 compiler only and the serial collector: a start and stop took 8 CPU-s instead of 14 (and
# 13 s instead of 21 s) with G1 and both compilers, 3 of each measured in one cgroup on this 2-core machine; the
# demo's and the tests' few thousand messages never need C2's code.
JVM_OPTIONS = [
    "-Xms128m",
    "-Xmx512m",
    "-XX:TieredStopAtLevel=1",
    "-XX:+UseSerialGC",
    "-Djava.awt.headless=true",
]


def _cluster_id() -> str:
    """A Kafka cluster id: a random UUID in Kafka's URL-safe base64 form (as `kafka-storage random-uuid`). It may
    start with `-`, so it is passed as `--cluster-id=<id>` (one argument, never taken for an option)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class LocalBroker(LocalServerInFolder):
    """`with LocalBroker() as broker:`; `broker.bootstrap_servers` is `127.0.0.1:PORT`.

    `stop()` then `start()` restarts the same broker (same ports, same log dirs); `kill()` ends it with SIGKILL.
    """

    def __init__(
        self,
        port: int | None = None,
        base_dir: str | Path | None = None,
        startup_timeout: float = 90.0,
    ):
        super().__init__(base_dir, "sharp_kafka_")
        self.host = "127.0.0.1"
        self.port = port or free_port()
        self.controller_port = free_port()
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
        return self.base_dir / "logs" / "stdout.log"

    @property
    def data_dir(self) -> Path:
        return self.base_dir / "data"

    @property
    def config_path(self) -> Path:
        return self.base_dir / "server.properties"

    def _write_config(self) -> None:
        listeners = f"PLAINTEXT://{self.host}:{self.port},CONTROLLER://{self.host}:{self.controller_port}"
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@{self.host}:{self.controller_port}",
            "listeners": listeners,
            "advertised.listeners": f"PLAINTEXT://{self.host}:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.data_dir),
            "num.partitions": "1",
            "auto.create.topics.enable": "false",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            # The demo replays days of binlog in seconds: keep every message (no time or size retention).
            "log.retention.ms": "-1",
            "log.retention.bytes": "-1",
        }
        self.config_path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))

    def _command(self, main_class: str, *args: str) -> list[str]:
        logs = self.base_dir / "logs"
        return [
            java(),
            *JVM_OPTIONS,
            f"-Dkafka.logs.dir={logs}",
            f"-Dlog4j2.configurationFile=file:{LOG4J_CONF}",
            "-cp",
            jvm.classpath("kafka"),
            main_class,
            *args,
        ]

    def _format_storage(self) -> None:
        """Format the log dir once (KRaft needs a cluster id and the controller's metadata log)."""
        if (self.data_dir / "meta.properties").exists():
            return
        cmd = self._command(
            "kafka.tools.StorageTool", "format", f"--cluster-id={_cluster_id()}", "-c", str(self.config_path)
        )
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"kafka-storage format failed ({done.returncode}): {done.stdout}{done.stderr}")

    def start(self) -> LocalBroker:
        self.base_dir.mkdir(parents=True, exist_ok=True)
        (self.base_dir / "logs").mkdir(exist_ok=True)
        self._write_config()
        self._format_storage()
        self.process = spawn_logged(
            self._command("kafka.Kafka", str(self.config_path)), self.log_path, cwd=self.base_dir
        )
        try:
            wait_for_port(self.port, timeout=self.startup_timeout, process=self.process)
            self._wait_metadata()
        except Exception:
            self.stop()
            raise
        return self

    def _wait_metadata(self) -> None:
        """Wait until the broker answers metadata with itself registered (the controller has elected it)."""

        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers})
        wait_ready(
            lambda: bool(admin.list_topics(timeout=2).brokers),
            [("Kafka broker", self.process, self.log_path)],
            self.startup_timeout,
            0.1,
            retry_on=(Exception,),  # KafkaException while the broker warms up
            failure=lambda last: RuntimeError(
                f"Kafka on {self.bootstrap_servers} answers no metadata: {last}; see {self.log_path}"
            ),
        )

    def create_topic(self, name: str, partitions: int = 1) -> None:
        """Create `name` (no error if it exists) and wait until every partition has a leader."""

        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers})
        future = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[name]
        try:
            future.result(30)
        except KafkaException as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            topic = admin.list_topics(topic=name, timeout=5).topics.get(name)
            if (
                topic
                and topic.error is None
                and topic.partitions
                and all(p.leader >= 0 for p in topic.partitions.values())
            ):
                return
            time.sleep(0.1)
        raise RuntimeError(f"topic {name} has no leader on {self.bootstrap_servers} after 30 s")

    def stop(self) -> None:
        """Stop the broker (SIGTERM: a controlled shutdown that flushes its logs)."""
        if self.process is not None:
            stop_process(self.process, grace_seconds=30)
            self.process = None

    def kill(self) -> None:
        """End the broker at once (SIGKILL), as a crash would: what it acknowledged is in its log files."""
        if self.process is not None:
            kill_process(self.process)
            self.process = None

    def __repr__(self) -> str:
        return f"LocalBroker({self.bootstrap_servers}, pid={self.pid}, dir={self.base_dir})"
