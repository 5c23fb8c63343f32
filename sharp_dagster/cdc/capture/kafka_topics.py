"""Kafka set-up of the collector: its producer defaults and the topics it sends to."""

from __future__ import annotations

import re
import time
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from sharp_dagster.cdc.capture.collector_state import CollectorError

# Producer settings the collector relies on; the caller's config may override them.
PRODUCER_DEFAULTS = {
    "acks": "all",
    "enable.idempotence": True,  # no duplicates or reordering from librdkafka's own retries
    "partitioner": "murmur2_random",  # the Java client's hash: other producers/tools agree on key -> partition
    "linger.ms": 5,
    "compression.type": "none",
}
_ADMIN_KEYS = re.compile(r"^(bootstrap\.servers|client\.id|security\.protocol|sasl\..*|ssl\..*|socket\..*)$")


def admin_config(producer_config: dict[str, Any]) -> dict[str, Any]:
    """The connection part of a producer/consumer config, for an AdminClient."""
    return {k: v for k, v in producer_config.items() if _ADMIN_KEYS.match(k)}


def ensure_topic(client_config: dict[str, Any], topic: str, partitions: int, timeout: float = 15.0) -> int:
    """Create `topic` with `partitions` partitions unless it exists; return its partition count."""
    admin = AdminClient(admin_config(client_config))
    existing = admin.list_topics(timeout=timeout).topics.get(topic)
    if existing is None or existing.error is not None:
        futures = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
        try:
            futures[topic].result(timeout)
        except KafkaException as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise CollectorError(f"cannot create topic {topic}: {exc}") from exc
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        meta = admin.list_topics(topic=topic, timeout=timeout).topics.get(topic)
        if meta is not None and meta.error is None and meta.partitions:
            return len(meta.partitions)
        time.sleep(0.1)
    raise CollectorError(f"topic {topic} has no partitions after {timeout:.0f}s")
