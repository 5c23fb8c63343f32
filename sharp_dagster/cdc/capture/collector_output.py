"""The collector's Kafka side: one producer, the delivery errors it reports, and the flush a saved position waits on.

A resume position may be saved only once every message read before it was acknowledged (`flush`): a delivery
error or a message still undelivered after the flush's wait stops the collector with a `CollectorError` and the
position is not saved, so a restart sends those changes again (at least once, never lost). A full local queue
(a large transaction) is drained by polling; nothing is saved meanwhile.
"""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Producer

from sharp_dagster.cdc.capture.collector_state import CollectorError
from sharp_dagster.cdc.change.messages import BinlogMessage, encode


class KafkaOutput:
    """`produce` encoded messages, `flush` before a save, `close` at the end; counts what it was given."""

    def __init__(self, producer_config: dict[str, Any]):
        self._producer: Producer | None = Producer(producer_config)
        self._delivery_errors: list[str] = []
        self._seq = 0
        self.since_flush = 0
        self.last_flush = time.monotonic()

    def encoded(self, message: BinlogMessage) -> bytes:
        """The message's Kafka value, numbered (`id`) and stamped with the time it was built (`ts`), as Canal's."""
        self._seq += 1
        message.id = self._seq
        message.ts = int(time.time() * 1000)
        return encode(message)

    def produce(self, topic: str, value: bytes, key: bytes | None, partition: int | None) -> None:
        kwargs: dict[str, Any] = {"key": key, "value": value, "on_delivery": self._on_delivery}
        if partition is not None:
            kwargs["partition"] = partition
        while True:
            try:
                self._producer.produce(topic, **kwargs)
                break
            except BufferError:
                # A large transaction filled the local queue: let deliveries drain (state is not saved here).
                self._producer.poll(0.5)
        self._producer.poll(0)
        self.since_flush += 1

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            self._delivery_errors.append(f"{msg.topic()}[{msg.partition()}]: {err}")

    def flush(self) -> None:
        """Every message produced so far acknowledged, else `CollectorError` (the position must not be saved)."""
        remaining = self._producer.flush(60)
        if remaining or self._delivery_errors:
            first = self._delivery_errors[0] if self._delivery_errors else "timed out"
            raise CollectorError(
                f"{remaining} messages undelivered and {len(self._delivery_errors)} delivery errors (first: {first}); "
                "the resume position was not saved, a restart repeats these changes"
            )
        self.since_flush = 0
        self.last_flush = time.monotonic()

    def close(self) -> int:
        """Deliver what can be delivered in 30 s; how many messages were not."""
        remaining = self._producer.flush(30)
        self._producer = None  # librdkafka's threads end with the last reference
        return remaining
