"""Hourly landing of a binlog topic into the raw binlog table, and the done markers (seed 002's Kafka2Hive + Checkdone).

`land()` reads one topic exactly from given per-partition start offsets up to end offsets captured when the run
starts, with Spark's Kafka batch source (`spark-sql-kafka-0-10`: `startingOffsets`/`endingOffsets` given as JSON,
`failOnDataLoss`; nothing is committed to a consumer group: the caller's job log keeps the offsets). So a re-run
with the same offsets reads exactly the same records, however many arrived since. The executors parse every record
(`messages.parse_message`, the one parser, run on the executors over Arrow record batches with
`DataFrame.mapInArrow`: the driver never holds the messages, and records cross between the JVM and Python as
columns, not one pickled row at a time), and Spark computes what the driver needs as small aggregates (counts,
quarantine reasons, per-partition event-time maxima, touched hours). The landing writes:

- row changes, DDL and TRUNCATE to `original_binlog.<db>`, partitioned by (table_name, dt, hour) of the event time
  (UTC). Within the batch a change read twice (same `event_uid`) is kept once, the copy at the lowest
  (partition, offset). Each touched partition is rewritten as its old rows plus the new rows whose `event_uid` it
  does not hold yet, so re-landing the same offsets (or a collector replay) changes nothing; a partition with
  nothing new is not rewritten at all;
- records that are not valid change messages to `original_binlog.<db>_quarantine` (partitioned by dt of the Kafka
  record timestamp), with the reason, topic, partition, offset and raw value, de-duplicated by
  (topic, partition, offset). Nothing is dropped silently.
Heartbeats are counted and feed the watermark; they are not landed.

A broker that goes away fails the landing fast: while Spark reads, the driver polls a librdkafka consumer
connected to the same cluster, whose error callback reports a lost cluster within seconds (Spark's own Kafka
clients would retry for minutes); the Spark jobs are then cancelled and a `LandingError` names the brokers. Any
other failure of Spark's read is re-raised as a `LandingError` too. Nothing is written before the read is whole.

Done markers live here too: `<warehouse>/original_binlog.db/_done/<db>/dt=YYYY-MM-DD/hour=HH`, one small JSON
file per hour, written when the hour and the lateness window after it are covered by the low watermark.

The watermark. For each partition p, `watermark[p]` is the largest event time `es` read from p so far, over row
changes and the collector's heartbeats, carried from run to run by the caller (`prior_watermarks`). The collector
sends to one partition in binlog order, so later records of p have event times above `watermark[p]` except for
statements that started earlier than they committed (`es` is the statement time): the lateness window bounds
that. The LOW watermark is the minimum over ALL partitions of the topic; a partition that never showed an event
time keeps it undefined and no marker is written. An hour [h, h+1) is done when low watermark >= h + 1 h +
lateness. An idle partition advances through heartbeats: the collector sends them to every partition after a
flush and when caught up, with the event time up to which everything was sent. Having read an idle partition up
to its end offset at time T alone would NOT prove that nothing older is still to come (the collector may be down
or behind), so T itself is never used as a watermark.

End offsets are the brokers' high watermarks (ListOffsets), captured once when the run starts.

The consumer config is librdkafka's (`bootstrap.servers`, `security.protocol`, ...) for the driver's consumer;
Spark's Java Kafka clients get `bootstrap.servers`, `security.protocol` and `sasl.mechanism(s)` from it, plus every
`kafka.`-prefixed key as is (e.g. `kafka.sasl.jaas.config`, `kafka.ssl.truststore.location`): Java client
settings that librdkafka does not know, passed to Spark only.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from pyspark import InheritableThread, StorageLevel
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

if TYPE_CHECKING:
    import pyarrow as pa

from sharp_dagster.cdc import binlog_schema as bs
from sharp_dagster.cdc import messages
from sharp_dagster.cdc.image_tables import write_typed_images
from sharp_dagster.cdc.shards import ShardRules
from sharp_dagster.spark.iceberg import IcebergTables
from sharp_dagster.spark.tables import TableRef

RAW_DATABASE = "original_binlog"
HOUR_MS = 3_600_000
DATA_COLUMNS = [name for name, _ in bs.RAW_BINLOG_COLUMNS]
QUARANTINE_COLUMNS: list[tuple[str, str]] = [
    ("reason", "string"),
    ("kafka_topic", "string"),
    ("kafka_partition", "int"),
    ("kafka_offset", "bigint"),
    ("kafka_timestamp_ms", "bigint"),
    ("raw_value", "binary"),
    ("quarantined_at_ms", "bigint"),
]
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
]
ROW, HEARTBEAT, QUARANTINE = "row", "heartbeat", "quarantine"
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
# Records per Spark task above which a topic with fewer partitions than cores is split into more tasks.
SPLIT_ABOVE_RECORDS = 20_000


class LandingError(RuntimeError):
    """The topic cannot be landed as asked (offsets out of range, broker unreachable, read timed out)."""


def raw_table_ref(database: str) -> TableRef:
    return TableRef(RAW_DATABASE, database, bs.RAW_BINLOG_PARTITION_COLUMNS)


def quarantine_table_ref(database: str) -> TableRef:
    return TableRef(RAW_DATABASE, f"{database}_quarantine", ("dt",))


@dataclass
class LandingResult:
    """What one landing run did; `to_dict()` is JSON-ready for the job log."""

    topic: str
    database: str
    read: int = 0
    landed: int = 0
    duplicates: int = 0
    quarantined: int = 0
    heartbeats: int = 0
    start_offsets: dict[int, int] = field(default_factory=dict)
    end_offsets: dict[int, int] = field(default_factory=dict)  # next offset to read: last read + 1
    touched_hours: list[tuple[str, str, str]] = field(default_factory=list)  # (table_name, dt, hour)
    written_partitions: list[tuple[str, str, str]] = field(default_factory=list)
    max_event_ts_ms: dict[int, int] = field(default_factory=dict)  # row changes read in this run
    min_event_ts_ms: int | None = None
    watermarks_ms: dict[int, int | None] = field(default_factory=dict)  # cumulative, incl. heartbeats
    low_watermark_ms: int | None = None
    quarantine_reasons: dict[str, int] = field(default_factory=dict)
    typed_images: dict[str, int] = field(default_factory=dict)  # logical table -> typed image rows written

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for key in ("start_offsets", "end_offsets", "max_event_ts_ms", "watermarks_ms"):
            data[key] = {str(k): v for k, v in data[key].items()}
        data["touched_hours"] = [list(h) for h in self.touched_hours]
        data["written_partitions"] = [list(h) for h in self.written_partitions]
        return data


# ---------------------------------------------------------------------------------------------------- kafka
class _BrokerErrors:
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


def _consumer(consumer_config: Mapping[str, Any], errors: _BrokerErrors | None = None) -> Consumer:
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


def _watermarks(consumer: Consumer, topic: str, timeout: float = 30.0) -> dict[int, tuple[int, int]]:
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
    consumer = _consumer(consumer_config)
    try:
        return {p: high for p, (_low, high) in _watermarks(consumer, topic, timeout).items()}
    finally:
        consumer.close()


# ---------------------------------------------------------------------------------------------------- landing
def land(
    spark: SparkSession,
    table_store: IcebergTables,
    consumer_config: Mapping[str, Any],
    topic: str,
    start_offsets: Mapping[int, int] | None,
    end_offsets: Mapping[int, int] | str = "latest",
    shard_rules: ShardRules | None = None,
    *,
    database: str | None = None,
    prior_watermarks: Mapping[int, int | None] | None = None,
    ingest_ts_ms: int | None = None,
    timeout_s: float = 300.0,
    commit_properties: Mapping[str, str] | None = None,
    image_columns: Mapping[str, Sequence[tuple[str, str]]] | None = None,
) -> LandingResult:
    """Land `topic` from `start_offsets` (missing partitions: from their first offset) up to `end_offsets`.

    `database` names the raw table `original_binlog.<database>`; by default the topic's suffix after `binlog.`.
    Each logical table's changes are also written with typed images (`image_tables`), typed by its images
    table's columns, then `image_columns[table]` (its configured schema), then its DDL and JSON values.
    """
    if shard_rules is None:
        raise ValueError("land(): shard_rules are required to fold physical table names")
    database = database or _database_of(topic)
    ingest = ingest_ts_ms if ingest_ts_ms is not None else int(time.time() * 1000)
    options = spark_kafka_options(consumer_config)
    errors = _BrokerErrors(options["kafka.bootstrap.servers"])
    consumer = _consumer(consumer_config, errors)
    parsed: _Parsed | None = None
    try:
        try:
            marks = _watermarks(consumer, topic)  # one ListOffsets per partition: first offsets, and the ends
            partitions = sorted(marks)
            ends = (
                {p: high for p, (_low, high) in marks.items()}
                if end_offsets == "latest"
                else dict(end_offsets)
            )
            starts: dict[int, int] = {}
            for p in partitions:
                low = marks[p][0]
                start = int(start_offsets[p]) if start_offsets and p in start_offsets else low
                end = int(ends.get(p, start))
                if start < low:
                    raise LandingError(
                        f"{topic}[{p}]: start offset {start} is before the first retained offset {low}: "
                        "records were lost"
                    )
                if start > end:
                    raise LandingError(
                        f"{topic}[{p}]: start offset {start} is beyond the end offset {end}; "
                        "was the topic re-created or the broker's storage lost?"
                    )
                starts[p] = start
                ends[p] = end
            result = LandingResult(
                topic=topic, database=database, start_offsets=dict(starts), end_offsets=dict(starts)
            )
            watermarks: dict[int, int | None] = {p: (prior_watermarks or {}).get(p) for p in partitions}
            parsed = _read(
                consumer,
                errors,
                topic,
                starts,
                ends,
                spark,
                options,
                shard_rules,
                ingest,
                result,
                watermarks,
                timeout_s,
            )
        except KafkaException as exc:
            errors.raise_if_any(topic)
            raise LandingError(f"{topic}: {exc.args[0].str() if exc.args else exc}") from exc
        finally:
            consumer.close()

        result.end_offsets = dict(ends)  # the whole fixed range was read (or the read raised)
        result.watermarks_ms = watermarks
        result.low_watermark_ms = low_watermark(watermarks)
        if parsed is not None:
            props = dict(commit_properties or {})
            _write_rows(table_store, database, parsed, result, props)
            if result.touched_hours:
                tables = sorted({table for table, _, _ in result.touched_hours})
                result.typed_images = write_typed_images(
                    table_store, database, parsed.unique_rows, tables, image_columns, props
                )
            _write_quarantine(table_store, database, parsed, ingest, props)
        return result
    finally:
        if parsed is not None:
            parsed.release()


def _database_of(topic: str) -> str:
    if topic.startswith("binlog."):
        return topic[len("binlog.") :]
    raise ValueError(f"cannot tell the source database of topic {topic!r}; pass database=")


@dataclass
class _Parsed:
    """The parsed records of one read, cached on the executors, and the batch's unique row changes."""

    records: DataFrame  # every record: kind row / heartbeat / quarantine (PARSED_COLUMNS), cached
    unique_rows: DataFrame  # row changes, one per event_uid (cached itself only when duplicates were dropped)
    rows_per_hour: dict[tuple[str, str, str], int]  # (table_name, dt, hour) -> unique rows
    quarantine_days: list[str]

    def release(self) -> None:
        self.unique_rows.unpersist()
        self.records.unpersist()


def _read(
    consumer: Consumer,
    errors: _BrokerErrors,
    topic: str,
    starts: dict[int, int],
    ends: dict[int, int],
    spark: SparkSession,
    kafka_options: Mapping[str, str],
    rules: ShardRules,
    ingest: int,
    result: LandingResult,
    watermarks: dict[int, int | None],
    timeout_s: float,
) -> _Parsed | None:
    """Read [starts, ends) of every partition with Spark's Kafka source, parse it on the executors, and fill
    `result`'s counts and `watermarks` from aggregates. None when the range is empty (no Spark job at all).

    `consumer` (connected to the same cluster, its error callback feeding `errors`) watches the cluster while
    Spark reads, so a lost broker fails the read within seconds.
    """
    total = sum(ends[p] - starts[p] for p in starts)
    if total == 0:
        return None
    reader = spark.read.format("kafka").options(**kafka_options)
    parallelism = spark.sparkContext.defaultParallelism
    if total >= SPLIT_ABOVE_RECORDS and len(starts) < parallelism:
        reader = reader.option("minPartitions", str(parallelism))  # one big partition on several cores
    kafka = (
        reader.option("subscribe", topic)
        .option("startingOffsets", json.dumps({topic: {str(p): o for p, o in starts.items()}}))
        .option("endingOffsets", json.dumps({topic: {str(p): o for p, o in ends.items()}}))
        .option("failOnDataLoss", "true")
        .load()
    )
    from pyspark.sql.pandas.types import to_arrow_schema  # imports pyarrow: only when a landing runs

    schema = StructType.fromDDL(", ".join(f"{n} {t}" for n, t in PARSED_COLUMNS))
    millis = F.unix_millis("timestamp")
    records = kafka.select(
        "value",
        "partition",
        "offset",
        F.when(millis >= 0, millis).otherwise(F.lit(None)).alias("timestamp_ms"),
    ).mapInArrow(_Parser(topic, rules, ingest, result.database, to_arrow_schema(schema)), schema)

    def read_and_summarize(abandoned: threading.Event) -> list:
        # persist() already plans the query, and planning asks the brokers for the topic's partitions: both
        # belong to the watched read. This is the one Spark job that reads Kafka; later jobs read the cache.
        records.persist(StorageLevel.MEMORY_AND_DISK)
        if abandoned.is_set():
            raise LandingError(f"{topic}: the read was abandoned")
        return (
            records.groupBy("kafka_partition", "kind", "reason_kind", *bs.RAW_BINLOG_PARTITION_COLUMNS)
            .agg(
                F.count(F.lit(1)).alias("n"),
                F.min("event_ts_ms").alias("min_es"),
                F.max("event_ts_ms").alias("max_es"),
            )
            .collect()
        )

    parsed: _Parsed | None = None
    try:
        summary = _watched(
            spark, consumer, errors, topic, read_and_summarize, timeout_s, abandon=records.unpersist
        )
        parsed = _Parsed(records, records.filter(F.col("kind") == ROW), {}, [])
        rows_read, parsed.rows_per_hour, parsed.quarantine_days = _summarize(summary, result, watermarks)
        rows = parsed.unique_rows
        if rows_read and rows.select("event_uid").distinct().count() < rows_read:
            # A change read twice (a collector replay inside the range): keep the copy at the lowest position.
            first = Window.partitionBy("event_uid").orderBy("kafka_partition", "kafka_offset")
            parsed.unique_rows = (
                rows.withColumn("_n", F.row_number().over(first))
                .filter("_n = 1")
                .drop("_n")
                .persist(StorageLevel.MEMORY_AND_DISK)
            )
            per_hour = parsed.unique_rows.groupBy(*bs.RAW_BINLOG_PARTITION_COLUMNS).count().collect()
            parsed.rows_per_hour = {(r.table_name, r.dt, r.hour): r["count"] for r in per_hour}
        result.duplicates += rows_read - sum(parsed.rows_per_hour.values())
    except BaseException:
        if parsed is not None:
            parsed.release()
        else:
            records.unpersist()
        raise
    return parsed


def _summarize(
    summary: list, result: LandingResult, watermarks: dict[int, int | None]
) -> tuple[int, dict[tuple[str, str, str], int], list[str]]:
    """Fill `result` and `watermarks` from the (partition, kind, reason kind, table, dt, hour) aggregate.

    Returns the rows read, the rows per (table_name, dt, hour) and the days of the quarantined records.
    """
    rows_read = 0
    reasons: dict[str, int] = {}
    per_hour: dict[tuple[str, str, str], int] = {}
    days: set[str] = set()
    for s in summary:
        p, n = s.kafka_partition, s.n
        result.read += n
        if s.kind == QUARANTINE:
            result.quarantined += n
            reasons[s.reason_kind] = reasons.get(s.reason_kind, 0) + n
            days.add(s.dt)
            continue
        watermarks[p] = max(watermarks.get(p) or 0, s.max_es)
        if s.kind == HEARTBEAT:
            result.heartbeats += n
        else:
            rows_read += n
            hour = (s.table_name, s.dt, s.hour)
            per_hour[hour] = per_hour.get(hour, 0) + n
            result.max_event_ts_ms[p] = max(result.max_event_ts_ms.get(p, 0), s.max_es)
            low = result.min_event_ts_ms
            result.min_event_ts_ms = s.min_es if low is None else min(low, s.min_es)
    result.quarantine_reasons = dict(sorted(reasons.items()))
    return rows_read, per_hour, sorted(days)


class _Parser:
    """The executors' side: Arrow batches of Kafka records (value, partition, offset, timestamp_ms) in, Arrow
    batches of PARSED_COLUMNS out, every record through `messages.parse_message`.

    A module-level class, so Spark ships it by reference and every Python worker imports the parser itself.
    `schema` is the Arrow schema of PARSED_COLUMNS as Spark expects it back (computed on the driver).
    """

    def __init__(self, topic: str, rules: ShardRules, ingest: int, database: str, schema: pa.Schema):
        self.topic, self.rules, self.ingest, self.database = topic, rules, ingest, database
        self.schema = schema

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

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
            return self._position(HEARTBEAT, partition, offset, event_ts_ms=parsed.es_ms)
        if isinstance(parsed, messages.Quarantined):
            # The record's own timestamp fixes the day, so re-landing the same offsets hits the same partition.
            day = _utc(timestamp_ms if timestamp_ms is not None else self.ingest).strftime("%Y-%m-%d")
            return self._position(
                QUARANTINE,
                partition,
                offset,
                reason=parsed.reason,
                reason_kind=_reason_kind(parsed.reason),
                kafka_timestamp_ms=timestamp_ms,
                raw_value=bytes(parsed.value),
                dt=day,
            )
        parsed["kind"] = ROW  # a fresh dict of the row's columns, ours to extend
        return parsed

    def _position(self, kind: str, partition: int, offset: int, **values: Any) -> dict[str, Any]:
        values.update(kind=kind, kafka_topic=self.topic, kafka_partition=partition, kafka_offset=offset)
        return values


def _watched(
    spark: SparkSession,
    consumer: Consumer,
    errors: _BrokerErrors,
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
        _probe(consumer, errors, topic)
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise LandingError(f"{topic}: Spark's Kafka read failed: {first[:1000]}") from exc
    return outcome["value"]


def _probe(consumer: Consumer, errors: _BrokerErrors, topic: str) -> None:
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


def _write_rows(
    store: IcebergTables, database: str, parsed: _Parsed, result: LandingResult, props: Mapping[str, str]
) -> None:
    """Append the changes not yet in the raw binlog table (by `event_uid`) in one commit: re-landing the same
    offsets, or a range that overlaps an earlier one, adds nothing twice."""
    ref = raw_table_ref(database)
    result.touched_hours = sorted(parsed.rows_per_hour)
    if not result.touched_hours:
        return
    rows = parsed.unique_rows.select(*DATA_COLUMNS, *bs.RAW_BINLOG_PARTITION_COLUMNS)
    if store.exists(ref):
        days = sorted({day for _, day, _ in result.touched_hours})
        existing = store.spark.table(store.name(ref)).where(F.col("dt").isin(days)).select("event_uid")
        fresh = rows.join(existing, "event_uid", "left_anti").select(
            *rows.columns
        )  # the table's column order
        counts = fresh.groupBy(*bs.RAW_BINLOG_PARTITION_COLUMNS).count().collect()
        per_hour = {(r.table_name, r.dt, r.hour): r["count"] for r in counts}
    else:
        fresh, per_hour = rows, dict(parsed.rows_per_hour)
    landed = sum(per_hour.values())
    result.duplicates += sum(parsed.rows_per_hour.values()) - landed
    if landed:
        store.append(ref, fresh, properties=props)
        result.landed += landed
        result.written_partitions = sorted(per_hour)


def _write_quarantine(
    store: IcebergTables, database: str, parsed: _Parsed, ingest: int, props: Mapping[str, str]
) -> None:
    """Append the quarantined messages not kept yet (by topic, partition and offset), in one commit."""
    if not parsed.quarantine_days:
        return
    ref = quarantine_table_ref(database)
    names = [*(n for n, _ in QUARANTINE_COLUMNS), "dt"]
    quarantined = (
        parsed.records.filter(F.col("kind") == QUARANTINE)
        .withColumn("quarantined_at_ms", F.lit(ingest).cast("bigint"))
        .select(*names)
    )
    if store.exists(ref):
        keys = ["kafka_topic", "kafka_partition", "kafka_offset"]
        kept = store.spark.table(store.name(ref)).where(F.col("dt").isin(parsed.quarantine_days))
        quarantined = quarantined.join(kept.select(*keys), keys, "left_anti").select(*names)
        # All kept already: an append of no rows would still commit an (empty) snapshot.
        if quarantined.isEmpty():
            return
    store.append(ref, quarantined, properties=props)


def _reason_kind(reason: str) -> str:
    return reason.split(":", 1)[0]


def _utc(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)


def low_watermark(watermarks: Mapping[int, int | None]) -> int | None:
    """The minimum over partitions, or None while some partition has none."""
    values = list(watermarks.values())
    if not values or any(v is None for v in values):
        return None
    return min(values)  # type: ignore[type-var]


# ---------------------------------------------------------------------------------------------------- done markers
class DoneMarkers:
    """The hourly done markers of one source database under a warehouse folder (local path or Hadoop URI)."""

    def __init__(self, warehouse_dir: str | Path, database: str, spark: SparkSession | None = None):
        self.warehouse_dir = str(warehouse_dir).rstrip("/")
        self.database = database
        self.root = f"{self.warehouse_dir}/{RAW_DATABASE}.db/_done/{database}"
        self._fs = _MarkerFs(self.warehouse_dir, spark)

    def marker_path(self, day: str, hour: str) -> str:
        return f"{self.root}/dt={day}/hour={hour}"

    def write(
        self, low_watermark_ms: int | None, lateness_minutes: int, since_ms: int
    ) -> list[tuple[str, str]]:
        """Write the marker of every hour from the hour of `since_ms` whose end + lateness the watermark passed.

        Returns the (dt, hour) markers written now; existing markers are left as they are.
        """
        if low_watermark_ms is None:
            return []
        written: list[tuple[str, str]] = []
        hour_start = since_ms - since_ms % HOUR_MS
        lateness_ms = lateness_minutes * 60_000
        payload = {"low_watermark_ms": low_watermark_ms, "lateness_minutes": lateness_minutes}
        while hour_start + HOUR_MS + lateness_ms <= low_watermark_ms:
            when = _utc(hour_start)
            day, hour = when.strftime("%Y-%m-%d"), when.strftime("%H")
            path = self.marker_path(day, hour)
            if not self._fs.exists(path):
                body = {**payload, "written_at_ms": int(time.time() * 1000), "hour_start_ms": hour_start}
                self._fs.write(path, json.dumps(body, sort_keys=True))
                written.append((day, hour))
            hour_start += HOUR_MS
        return written

    def hours_done(self, day: str) -> list[str]:
        """The hours ('00'..'23') of `day` (YYYY-MM-DD) that have a marker, sorted."""
        names = self._fs.list(f"{self.root}/dt={day}")
        return sorted(n.split("=", 1)[1] for n in names if n.startswith("hour="))

    def day_complete(self, day: str) -> bool:
        return len(self.hours_done(day)) == 24


def write_done_markers(
    warehouse_dir: str | Path,
    database: str,
    low_watermark_ms: int | None,
    lateness_minutes: int,
    since_ms: int,
    spark: SparkSession | None = None,
) -> list[tuple[str, str]]:
    """See `DoneMarkers.write`."""
    return DoneMarkers(warehouse_dir, database, spark).write(low_watermark_ms, lateness_minutes, since_ms)


def hours_done(
    warehouse_dir: str | Path, database: str, day: str, spark: SparkSession | None = None
) -> list[str]:
    return DoneMarkers(warehouse_dir, database, spark).hours_done(day)


def day_complete(
    warehouse_dir: str | Path, database: str, day: str, spark: SparkSession | None = None
) -> bool:
    """True when all 24 hourly markers of `day` exist: the daily merge of that day may run."""
    return DoneMarkers(warehouse_dir, database, spark).day_complete(day)


class _MarkerFs:
    """Tiny file access: the local file system for plain paths, Hadoop's FileSystem (through Spark) otherwise."""

    def __init__(self, root: str, spark: SparkSession | None):
        self.local = "://" not in root or root.startswith("file://")
        self.spark = spark
        if not self.local and spark is None:
            raise ValueError(f"done markers under {root} need a SparkSession to reach the file system")

    @staticmethod
    def _local(path: str) -> Path:
        return Path(path[len("file://") :] if path.startswith("file://") else path)

    def _hadoop(self, path: str):
        jvm = self.spark.sparkContext._jvm  # type: ignore[union-attr]
        conf = self.spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[union-attr]
        hpath = jvm.org.apache.hadoop.fs.Path(path)
        return hpath, hpath.getFileSystem(conf)

    def exists(self, path: str) -> bool:
        if self.local:
            return self._local(path).exists()
        hpath, fs = self._hadoop(path)
        return bool(fs.exists(hpath))

    def write(self, path: str, text: str) -> None:
        if self.local:
            target = self._local(path)
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".marker.", dir=target.parent)
            with os.fdopen(fd, "w") as fh:
                fh.write(text)
            os.replace(tmp, target)
            return
        hpath, fs = self._hadoop(path)
        out = fs.create(hpath, True)
        try:
            out.write(bytearray(text.encode("utf-8")))
        finally:
            out.close()

    def list(self, folder: str) -> list[str]:
        if self.local:
            base = self._local(folder)
            return [p.name for p in base.iterdir() if p.is_file()] if base.is_dir() else []
        hpath, fs = self._hadoop(folder)
        if not fs.exists(hpath):
            return []
        return [s.getPath().getName() for s in fs.listStatus(hpath) if s.isFile()]
