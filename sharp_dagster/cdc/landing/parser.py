"""The executors' side of the landing: every Kafka record parsed into a landed row, a heartbeat or a quarantined
record (`PARSED_COLUMNS`), over Arrow record batches."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from sharp_dagster.cdc.change import binlog_schema as bs
from sharp_dagster.cdc.change import messages
from sharp_dagster.cdc.source.shards import ShardRules

if TYPE_CHECKING:
    import pyarrow as pa

# What the executors' parser returns for every record: a landed row, a heartbeat or a quarantined record, told
# apart by `kind`. Rows fill the raw binlog columns; heartbeats the event time and Kafka position; quarantined
# records the reason, Kafka position and timestamp, raw value, and in `dt` the day of their quarantine partition.
PARSED_COLUMNS: list[tuple[str, str]] = [
    ("kind", "string"),
    ("reason", "string"),
    ("reason_kind", "string"),
    ("kafka_timestamp_ms", "bigint"),
    ("raw_value", "binary"),
    *bs.RAW_BINLOG_COLUMNS,
    *((name, "string") for name in bs.RAW_BINLOG_PARTITION_COLUMNS),
    # The time that places a record and moves its partition's watermark: a row's commit, a heartbeat's es.
    ("commit_ts_ms", "bigint"),
]
ROW, HEARTBEAT, QUARANTINE = "row", "heartbeat", "quarantine"


class RecordParser:
    """The executors' side: Arrow batches of Kafka records (value, partition, offset, timestamp_ms) in, Arrow
    batches of PARSED_COLUMNS out, every record through `messages.parse_message`.

    A module-level class, so Spark ships it by reference and every Python worker imports the parser itself.
    `schema` is the Arrow schema of PARSED_COLUMNS as Spark expects it back (computed on the driver).
    """

    def __init__(self, topic: str, rules: ShardRules, ingest: int, database: str, schema: pa.Schema):
        self.topic, self.rules, self.ingest, self.database = topic, rules, ingest, database
        self.schema = schema

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa  # not at the top: the code location imports this module, only a landing needs pyarrow

        for batch in batches:
            columns = (batch.column(i).to_pylist() for i in range(4))
            parsed = [self.parse(*record) for record in zip(*columns, strict=True)]
            # Missing keys are nulls: a row change fills no quarantine fields, a heartbeat only its position.
            yield pa.RecordBatch.from_pylist(parsed, schema=self.schema)

    def parse(self, value: Any, partition: int, offset: int, timestamp_ms: int | None) -> dict[str, Any]:
        parsed = messages.parse_message(
            value,
            self.topic,
            partition,
            offset,
            self.rules,
            ingest_ts_ms=self.ingest,
            timestamp_ms=timestamp_ms,
            expected_database=self.database,  # the topic carries this database only
        )
        if isinstance(parsed, messages.Heartbeat):
            es = parsed.es_ms
            return self._position(HEARTBEAT, partition, offset, event_ts_ms=es, commit_ts_ms=es)
        if isinstance(parsed, messages.Quarantined):
            # The record's own timestamp fixes the day, so re-landing the same offsets hits the same partition.
            day = utc_datetime(timestamp_ms if timestamp_ms is not None else self.ingest).strftime("%Y-%m-%d")
            return self._position(
                QUARANTINE,
                partition,
                offset,
                reason=parsed.reason,
                reason_kind=reason_kind(parsed.reason),
                kafka_timestamp_ms=timestamp_ms,
                raw_value=bytes(parsed.value),
                dt=day,
            )
        parsed["kind"] = ROW  # a fresh dict of the row's columns, ours to extend
        return parsed

    def _position(self, kind: str, partition: int, offset: int, **values: Any) -> dict[str, Any]:
        values.update(kind=kind, kafka_topic=self.topic, kafka_partition=partition, kafka_offset=offset)
        return values


def reason_kind(reason: str) -> str:
    """The kind of a quarantine reason: its text before the first colon."""
    return reason.split(":", 1)[0]


def utc_datetime(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)
