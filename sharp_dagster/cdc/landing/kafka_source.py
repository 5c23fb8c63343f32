"""The landing's Kafka side: its consumer, Spark's Kafka source options, offsets, and the watched Spark read.

A broker that goes away fails the landing fast: while Spark reads, the driver polls a librdkafka consumer connected
to the same cluster (`BrokerErrors` is its error callback) and `watched` cancels the Spark jobs (see `landing.py`).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from pyspark import InheritableThread
from pyspark.sql import SparkSession

CONSUMER_DEFAULTS = {
    "group.id": "sharp-dagster-landing",  # required by librdkafka; never joined (assign) nor committed
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "enable.partition.eof": True,
    "auto.offset.reset": "error",
    "fetch.wait.max.ms": 100,
}
# librdkafka settings that Spark's Java Kafka clients know under a name of their own.
JAVA_CLIENT_KEYS = {
    "bootstrap.servers": "bootstrap.servers",
    "security.protocol": "security.protocol",
    "sasl.mechanism": "sasl.mechanism",
    "sasl.mechanisms": "sasl.mechanism",
}


class LandingError(RuntimeError):
    """The topic cannot be landed as asked (offsets out of range, broker unreachable, read timed out)."""


class BrokerErrors:
    """librdkafka reports a lost cluster through the error callback, never as a message: keep it to fail fast.

    Without this a read whose brokers all went away would wait for its whole timeout; with it the landing fails
    within seconds, records no offsets, and the next run reads the same range again.
    """

    FATAL = {KafkaError._ALL_BROKERS_DOWN, KafkaError._AUTHENTICATION}

    def __init__(self, servers: str = "") -> None:
        self.servers = servers
        self.errors: list[KafkaError] = []

    def __call__(self, error: KafkaError) -> None:
        if error.code() in self.FATAL or error.fatal():
            self.errors.append(error)

    def raise_if_any(self, topic: str) -> None:
        if self.errors:
            raise LandingError(
                f"{topic}: the Kafka cluster at {self.servers or '?'} became unreachable: {self.errors[-1].str()}"
            )


def landing_consumer(consumer_config: Mapping[str, Any], errors: BrokerErrors | None = None) -> Consumer:
    extra = {"error_cb": errors} if errors is not None else {}
    # `kafka.`-prefixed keys are Java client settings for Spark's source; librdkafka would reject them.
    own = {k: v for k, v in consumer_config.items() if not k.startswith("kafka.")}
    return Consumer({**CONSUMER_DEFAULTS, **own, **extra})


def spark_kafka_options(consumer_config: Mapping[str, Any]) -> dict[str, str]:
    """The options of Spark's Kafka source for the cluster `consumer_config` (librdkafka's) reaches."""
    if not consumer_config.get("bootstrap.servers"):
        raise ValueError("the Kafka consumer config has no bootstrap.servers")
    options = {
        f"kafka.{JAVA_CLIENT_KEYS[k]}": str(v) for k, v in consumer_config.items() if k in JAVA_CLIENT_KEYS
    }
    options.update({k: str(v) for k, v in consumer_config.items() if k.startswith("kafka.")})
    return options


def topic_partitions(consumer: Consumer, topic: str, timeout: float = 15.0) -> list[int]:
    meta = consumer.list_topics(topic=topic, timeout=timeout).topics.get(topic)
    if meta is None or meta.error is not None or not meta.partitions:
        reason = meta.error if meta is not None and meta.error is not None else "no partitions"
        raise LandingError(f"topic {topic} is not available: {reason}")
    return sorted(meta.partitions)


def kafka_watermarks(consumer: Consumer, topic: str, timeout: float = 30.0) -> dict[int, tuple[int, int]]:
    """(first retained offset, offset after the last record) of every partition now (Kafka's ListOffsets)."""
    marks = {}
    for p in topic_partitions(consumer, topic, timeout):
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout, cached=False)
        marks[p] = (int(low), int(high))
    return marks


def capture_end_offsets(
    consumer_config: Mapping[str, Any], topic: str, timeout: float = 30.0
) -> dict[int, int]:
    """The offset after the last record of every partition now (Kafka's ListOffsets high watermark)."""
    consumer = landing_consumer(consumer_config)
    try:
        return {p: high for p, (_low, high) in kafka_watermarks(consumer, topic, timeout).items()}
    finally:
        consumer.close()


def watched(
    spark: SparkSession,
    consumer: Consumer,
    errors: BrokerErrors,
    topic: str,
    action: Callable[[threading.Event], Any],
    timeout_s: float,
    abandon: Callable[[], Any],
) -> Any:
    """Run the Spark `action` in a job group while this thread watches the cluster and the clock.

    A lost cluster (librdkafka's error callback) or the deadline cancels the group's jobs and raises a
    `LandingError`; a failure of the action itself is re-raised as one, naming the brokers when they are gone.
    Spark's driver may be inside a Kafka metadata call that no cancel reaches: that thread then ends on its own
    after its client's timeouts, sees it was abandoned (`action` gets the event) and calls `abandon` (e.g. to
    drop a cache it made).
    """
    sc = spark.sparkContext
    group = f"sharp-dagster-landing-{uuid.uuid4().hex}"
    outcome: dict[str, Any] = {}
    abandoned = threading.Event()

    def run() -> None:
        sc.setJobGroup(group, f"land {topic}", interruptOnCancel=True)
        try:
            outcome["value"] = action(abandoned)
        except BaseException as exc:  # noqa: BLE001 - handed to the watching thread
            outcome["error"] = exc
        if abandoned.is_set():
            abandon()

    worker = InheritableThread(target=run, name=f"landing-{topic}", daemon=True)
    worker.start()
    deadline = time.monotonic() + timeout_s
    while worker.is_alive():
        consumer.poll(0.2)  # serves librdkafka's callbacks (no partition is assigned: returns nothing)
        if errors.errors or time.monotonic() > deadline:
            abandoned.set()
            sc.cancelJobGroup(group)
            worker.join(5)
            errors.raise_if_any(topic)
            raise LandingError(f"{topic}: Spark's Kafka read timed out after {timeout_s:.0f}s")
        worker.join(0.05)
    if "error" in outcome:
        exc = outcome["error"]
        errors.raise_if_any(topic)
        probe(consumer, errors, topic)
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise LandingError(f"{topic}: Spark's Kafka read failed: {first[:1000]}") from exc
    return outcome["value"]


def probe(consumer: Consumer, errors: BrokerErrors, topic: str) -> None:
    """Raise the 'unreachable' LandingError when the cluster does not answer a metadata request now."""
    try:
        consumer.list_topics(topic=topic, timeout=5)
    except KafkaException as exc:
        errors.raise_if_any(topic)
        raise LandingError(
            f"{topic}: the Kafka cluster at {errors.servers} became unreachable: "
            f"{exc.args[0].str() if exc.args else exc}"
        ) from exc
    errors.raise_if_any(topic)
