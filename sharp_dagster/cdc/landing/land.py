"""Hourly landing of a binlog topic into the raw binlog table, and the done markers (the Kafka-to-table landing and its done markers).

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
file per hour, written when the hour and the lateness window after it are covered by the low watermark
(`done_markers.hours_to_mark` decides which hours, for every landing path).

Commit time. A change is placed (dt, hour) by the commit time of its transaction (`commitTs`, see
`messages.py`), not by its statement time `es`, which the raw table keeps as `event_ts_ms`: a transaction that
began on day D and committed on D+1 belongs to D+1, wholly. Messages without `commitTs` (an older collector,
plain Canal) are placed by `es`.

The watermark. For each partition p, `watermark[p]` is the largest commit time read from p so far, over row
changes and the collector's heartbeats, carried from run to run by the caller (`prior_watermarks`). The collector
sends a transaction at its commit, in binlog (commit) order, so later records of p have commit times at or above
`watermark[p]`, up to the clock's whole-second rounding and the moment between a commit's time and its write to
the binlog: the lateness window bounds that. The LOW watermark is the minimum over ALL partitions of the topic; a partition that never showed an event
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

The parts: `landing_kafka.py` (consumer, offsets, the watched Spark read), `landing_parser.py` (the executors'
parser), `done_markers.py` (the hourly done markers).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaException
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from sharp_dagster.cdc.change import binlog_schema as bs
from sharp_dagster.cdc.landing.image_tables import write_typed_images
from sharp_dagster.cdc.landing.kafka_source import (
    BrokerErrors,
    LandingError,
    kafka_watermarks,
    landing_consumer,
    spark_kafka_options,
    watched,
)
from sharp_dagster.cdc.landing.parser import HEARTBEAT, PARSED_COLUMNS, QUARANTINE, ROW, RecordParser
from sharp_dagster.cdc.landing.raw_tables import QUARANTINE_COLUMNS, quarantine_table_ref, raw_table_ref
from sharp_dagster.cdc.source.shards import ShardRules
from sharp_dagster.spark.iceberg import IcebergTables

DATA_COLUMNS = [name for name, _ in bs.RAW_BINLOG_COLUMNS]
# Records per Spark task above which a topic with fewer partitions than cores is split into more tasks.
SPLIT_ABOVE_RECORDS = 20_000


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
    min_event_ts_ms: int | None = None  # the earliest commit time of the row changes read in this run
    # The earliest commit time of a change or heartbeat time read: in this run, then (set by the caller) ever.
    first_seen_ms: int | None = None
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
    errors = BrokerErrors(options["kafka.bootstrap.servers"])
    consumer = landing_consumer(consumer_config, errors)
    parsed: _Parsed | None = None
    try:
        try:
            # One ListOffsets per partition: first offsets, and the ends.
            starts, ends = _offset_range(kafka_watermarks(consumer, topic), topic, start_offsets, end_offsets)
            result = LandingResult(
                topic=topic, database=database, start_offsets=dict(starts), end_offsets=dict(starts)
            )
            watermarks: dict[int, int | None] = {p: (prior_watermarks or {}).get(p) for p in sorted(starts)}
            parsed = _read(
                consumer, errors, topic, starts, ends, spark, options, shard_rules, ingest, result, watermarks,
                timeout_s,
            )  # fmt: skip
        except KafkaException as exc:
            errors.raise_if_any(topic)
            raise LandingError(f"{topic}: {exc.args[0].str() if exc.args else exc}") from exc
        finally:
            consumer.close()

        result.end_offsets = dict(ends)  # the whole fixed range was read (or the read raised)
        result.watermarks_ms = watermarks
        result.low_watermark_ms = low_watermark(watermarks)
        if parsed is not None:
            _write(
                table_store, database, parsed, result, ingest, image_columns, dict(commit_properties or {})
            )
        return result
    finally:
        if parsed is not None:
            parsed.release()


def _offset_range(
    marks: Mapping[int, tuple[int, int]],
    topic: str,
    start_offsets: Mapping[int, int] | None,
    end_offsets: Mapping[int, int] | str,
) -> tuple[dict[int, int], dict[int, int]]:
    """The (starts, ends) to read of every partition, from the brokers' (first, high) offsets `marks`: a start
    before the first retained offset (records lost) or beyond the end (topic re-created) is refused."""
    ends = {p: high for p, (_low, high) in marks.items()} if end_offsets == "latest" else dict(end_offsets)
    starts: dict[int, int] = {}
    for p in sorted(marks):
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
    return starts, ends


def _write(
    store: IcebergTables,
    database: str,
    parsed: _Parsed,
    result: LandingResult,
    ingest: int,
    image_columns: Mapping[str, Sequence[tuple[str, str]]] | None,
    props: Mapping[str, str],
) -> None:
    """Write what a whole read parsed: the raw rows, each touched table's typed images, the quarantine."""
    _write_rows(store, database, parsed, result, props)
    if result.touched_hours:
        tables = sorted({table for table, _, _ in result.touched_hours})
        result.typed_images = write_typed_images(
            store, database, parsed.unique_rows, tables, image_columns, props
        )
    _write_quarantine(store, database, parsed, ingest, props)


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
    errors: BrokerErrors,
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
    records = _parsed_records(spark, kafka_options, topic, starts, ends, rules, ingest, result.database)

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
                # Commit times: a change is placed, and its partition's watermark moved, by its commit.
                F.min("commit_ts_ms").alias("min_es"),
                F.max("commit_ts_ms").alias("max_es"),
            )
            .collect()
        )

    parsed: _Parsed | None = None
    try:
        summary = watched(
            spark, consumer, errors, topic, read_and_summarize, timeout_s, abandon=records.unpersist
        )
        parsed = _Parsed(records, records.filter(F.col("kind") == ROW), {}, [])
        rows_read, parsed.rows_per_hour, parsed.quarantine_days = _summarize(summary, result, watermarks)
        _keep_first_copies(parsed, rows_read)
        result.duplicates += rows_read - sum(parsed.rows_per_hour.values())
    except BaseException:
        if parsed is not None:
            parsed.release()
        else:
            records.unpersist()
        raise
    return parsed


def _parsed_records(
    spark: SparkSession,
    kafka_options: Mapping[str, str],
    topic: str,
    starts: dict[int, int],
    ends: dict[int, int],
    rules: ShardRules,
    ingest: int,
    database: str,
) -> DataFrame:
    """The plan (nothing read yet) of [starts, ends) of every partition, parsed on the executors."""
    total = sum(ends[p] - starts[p] for p in starts)
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
    return kafka.select(
        "value",
        "partition",
        "offset",
        F.when(millis >= 0, millis).otherwise(F.lit(None)).alias("timestamp_ms"),
    ).mapInArrow(RecordParser(topic, rules, ingest, database, to_arrow_schema(schema)), schema)


def _keep_first_copies(parsed: _Parsed, rows_read: int) -> None:
    """Keep one copy of a change read twice (a collector replay inside the range): the one at the lowest
    (partition, offset); `parsed.rows_per_hour` then counts the unique rows."""
    rows = parsed.unique_rows
    if not rows_read or rows.select("event_uid").distinct().count() >= rows_read:
        return
    first = Window.partitionBy("event_uid").orderBy("kafka_partition", "kafka_offset")
    parsed.unique_rows = (
        rows.withColumn("_n", F.row_number().over(first))
        .filter("_n = 1")
        .drop("_n")
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    per_hour = parsed.unique_rows.groupBy(*bs.RAW_BINLOG_PARTITION_COLUMNS).count().collect()
    parsed.rows_per_hour = {(r.table_name, r.dt, r.hour): r["count"] for r in per_hour}


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
        first = result.first_seen_ms
        result.first_seen_ms = s.min_es if first is None else min(first, s.min_es)
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


def low_watermark(watermarks: Mapping[int, int | None]) -> int | None:
    """The minimum over partitions, or None while some partition has none."""
    values = list(watermarks.values())
    if not values or any(v is None for v in values):
        return None
    return min(values)  # type: ignore[type-var]
