"""Fixtures of the CDC tests: one private MariaDB (row binlog) and one Apache Kafka broker for the whole session.

Both start on free loopback ports with their files under the run's temp folder and are stopped by their own pid.
Tests share them, so each test works in a database of its own (`cdc.new_database()`) with topics of its own, and
starts its collector at the GTID position the server had when the test began, not at the start of the binlog.
"""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka import Producer as KafkaProducer

from sharp_dagster.cdc.capture.collector import Collector
from sharp_dagster.cdc.capture.kafka_topics import ensure_topic
from sharp_dagster.cdc.landing.kafka_source import capture_end_offsets
from sharp_dagster.cdc.source.config import MysqlSettings, SourceConfig, source_config_from_dict
from sharp_dagster.servers import LocalBroker, LocalMariaDB

_DB_COUNTER = itertools.count(1)


@pytest.fixture(scope="session")
def mariadb(run_dir: Path):
    server = LocalMariaDB(base_dir=run_dir / "mariadb")
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def broker(run_dir: Path):
    server = LocalBroker(base_dir=run_dir / "kafka")
    server.start()
    yield server
    server.stop()


class CdcEnv:
    """Helpers over the shared servers for one test."""

    def __init__(self, mariadb: LocalMariaDB, broker: LocalBroker, tmp_path: Path):
        self.mariadb = mariadb
        self.broker = broker
        self.tmp_path = tmp_path
        self.start_gtid = self.gtid_pos() or "earliest"  # a fresh server has no GTID yet

    @property
    def mysql(self) -> MysqlSettings:
        return MysqlSettings(self.mariadb.host, self.mariadb.port, "root", "")

    @property
    def kafka(self) -> dict[str, Any]:
        return {"bootstrap.servers": self.broker.bootstrap_servers}

    def gtid_pos(self) -> str:
        conn = self.mariadb.connect()
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT @@GLOBAL.gtid_binlog_pos")
                return cur.fetchone()[0]
        finally:
            conn.close()

    def new_database(self, prefix: str = "shop") -> str:
        name = f"{prefix}_{next(_DB_COUNTER)}_{int(time.time() * 1000) % 100000}"
        self.mariadb.execute(f"CREATE DATABASE {name}")
        return name

    def sql(self, database: str, *statements: str) -> None:
        self.mariadb.execute(*statements, database=database)

    def config(
        self, database: str, topic: str | None = None, partitions: int = 2, lateness: int = 15
    ) -> SourceConfig:
        return source_config_from_dict(
            {
                "source_id": "test-mariadb",
                "replica_server_id": 5000 + next(_DB_COUNTER),
                "lateness_minutes": lateness,
                "topic_partitions": partitions,
                "databases": [
                    {
                        "name": database,
                        "topic": topic or f"binlog.{database}",
                        "tables": [
                            {"name": "user_info", "shard_regex": r"user_info_(\d+)", "primary_key": ["id"]},
                            {"name": "typed", "primary_key": ["id"]},
                        ],
                    }
                ],
            }
        )

    def collector(self, source: SourceConfig, state: Any = None, **options: Any) -> Collector:
        options.setdefault("start", self.start_gtid)
        return Collector(self.mysql, self.kafka, source, state or self.tmp_path / "state.json", **options)

    def create_topic(self, topic: str, partitions: int = 2) -> None:
        ensure_topic(self.kafka, topic, partitions)

    def produce(self, topic: str, records: list[tuple[int, bytes]], timestamp_ms: int | None = None) -> None:
        """Send raw values to given partitions, in order."""
        producer = KafkaProducer({**self.kafka, "linger.ms": 0})
        for partition, value in records:
            kwargs: dict[str, Any] = {"partition": partition}
            if timestamp_ms is not None:
                kwargs["timestamp"] = timestamp_ms
            producer.produce(topic, value=value, **kwargs)
        assert producer.flush(30) == 0

    def read_topic(self, topic: str) -> list[dict[str, Any]]:
        """Every record of the topic as {partition, offset, key, value (parsed JSON or raw bytes)}."""
        ends = capture_end_offsets(self.kafka, topic)
        consumer = Consumer(
            {
                **self.kafka,
                "group.id": "tests",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "fetch.wait.max.ms": 10,
            }
        )
        out: list[dict[str, Any]] = []
        try:
            wanted = {p for p, end in ends.items() if end > 0}
            consumer.assign([TopicPartition(topic, p, 0) for p in wanted])
            deadline = time.monotonic() + 30
            while wanted and time.monotonic() < deadline:
                for msg in consumer.consume(500, timeout=0.5):
                    if msg.error():
                        if (
                            msg.error().code() == KafkaError._PARTITION_EOF
                            and msg.offset() >= ends[msg.partition()]
                        ):
                            wanted.discard(msg.partition())
                        continue
                    if msg.offset() >= ends[msg.partition()]:
                        continue
                    try:
                        value: Any = json.loads(msg.value())
                    except ValueError:
                        value = msg.value()
                    out.append(
                        {
                            "partition": msg.partition(),
                            "offset": msg.offset(),
                            "key": msg.key(),
                            "value": value,
                        }
                    )
            assert not wanted, f"topic {topic}: partitions {wanted} not read to their end"
        finally:
            consumer.close()
        return sorted(out, key=lambda r: (r["partition"], r["offset"]))

    def changes(self, topic: str) -> list[dict[str, Any]]:
        """The change messages (no heartbeats) of the topic, in binlog order."""
        return changes(self.read_topic(topic))


@pytest.fixture()
def cdc(mariadb: LocalMariaDB, broker: LocalBroker, tmp_path: Path) -> CdcEnv:
    return CdcEnv(mariadb, broker, tmp_path)


def changes(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The non-heartbeat messages of `read_topic` output, in binlog order."""
    values = [
        r["value"] for r in records if isinstance(r["value"], dict) and r["value"].get("type") != "HEARTBEAT"
    ]
    return sorted(values, key=lambda v: (v["binlogFile"], v["binlogPos"], v["rowIdx"]))
