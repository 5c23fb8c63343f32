"""Hourly landing of a binlog topic into the raw binlog table, and the done markers (seed 002's Kafka2Hive + Checkdone).

`land()` reads one topic exactly from given per-partition start offsets up to end offsets captured when the run
starts (a consumer with `assign()` and explicit offsets; nothing is committed to a consumer group: the caller's
job log keeps the offsets), parses every record (`messages.parse_message`) and writes:

- row changes, DDL and TRUNCATE to `original_binlog.<db>`, partitioned by (table_name, dt, hour) of the event time
  (UTC). Each touched partition is rewritten as its old rows plus the new rows whose `event_uid` it does not hold
  yet, so re-landing the same offsets (or a collector replay) changes nothing; a partition with nothing new is
  not rewritten at all;
- records that are not valid change messages to `original_binlog.<db>_quarantine` (partitioned by dt of the Kafka
  record timestamp), with the reason, topic, partition, offset and raw value, de-duplicated by
  (topic, partition, offset). Nothing is dropped silently.
Heartbeats are counted and feed the watermark; they are not landed.

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

Tansu 0.6 (the local broker) reports a high watermark that is the base offset of the last record batch plus one,
not the last offset plus one. `capture_end_offsets` therefore does not trust ListOffsets: it reads each
partition from (reported high - 1) until the consumer reports end of partition, which is exact on both Tansu and
Kafka.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition
from pyspark.sql import SparkSession

from sharp_dagster.cdc import binlog_schema as bs
from sharp_dagster.cdc.messages import Heartbeat, Quarantined, parse_message
from sharp_dagster.cdc.shards import ShardRules
from sharp_dagster.spark.tables import TableRef, TableStore

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
CONSUMER_DEFAULTS = {
    "group.id": "sharp-dagster-landing",  # required by librdkafka; never joined (assign) nor committed
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "enable.partition.eof": True,
    "auto.offset.reset": "error",
    "fetch.wait.max.ms": 100,
}


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

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for key in ("start_offsets", "end_offsets", "max_event_ts_ms", "watermarks_ms"):
            data[key] = {str(k): v for k, v in data[key].items()}
        data["touched_hours"] = [list(h) for h in self.touched_hours]
        data["written_partitions"] = [list(h) for h in self.written_partitions]
        return data


# ---------------------------------------------------------------------------------------------------- kafka
def _consumer(consumer_config: Mapping[str, Any]) -> Consumer:
    return Consumer({**CONSUMER_DEFAULTS, **consumer_config})


def topic_partitions(consumer: Consumer, topic: str, timeout: float = 15.0) -> list[int]:
    meta = consumer.list_topics(topic=topic, timeout=timeout).topics.get(topic)
    if meta is None or meta.error is not None or not meta.partitions:
        reason = meta.error if meta is not None and meta.error is not None else "no partitions"
        raise LandingError(f"topic {topic} is not available: {reason}")
    return sorted(meta.partitions)


def capture_end_offsets(
    consumer_config: Mapping[str, Any], topic: str, timeout: float = 30.0
) -> dict[int, int]:
    """The offset after the last record of every partition now (see the module docstring for why it probes)."""
    consumer = _consumer(consumer_config)
    try:
        partitions = topic_partitions(consumer, topic, timeout)
        ends: dict[int, int] = {}
        probe: list[TopicPartition] = []
        for p in partitions:
            low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, p), timeout=timeout, cached=False
            )
            if high <= low:
                ends[p] = high
            else:
                probe.append(TopicPartition(topic, p, high - 1))
                ends[p] = high
        if probe:
            consumer.assign(probe)
            waiting = {tp.partition for tp in probe}
            deadline = time.monotonic() + timeout
            while waiting:
                if time.monotonic() > deadline:
                    raise LandingError(
                        f"{topic}: no end of partition reported for {sorted(waiting)} in {timeout:.0f}s"
                    )
                for msg in consumer.consume(500, timeout=0.5):
                    err = msg.error()
                    if err is None:
                        ends[msg.partition()] = max(ends[msg.partition()], msg.offset() + 1)
                    elif err.code() == KafkaError._PARTITION_EOF:
                        ends[msg.partition()] = max(ends[msg.partition()], msg.offset())
                        waiting.discard(msg.partition())
                    else:
                        raise LandingError(f"{topic}[{msg.partition()}]: {err.str()}")
        return ends
    finally:
        consumer.close()


# ---------------------------------------------------------------------------------------------------- landing
def land(
    spark: SparkSession,
    table_store: TableStore,
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
) -> LandingResult:
    """Land `topic` from `start_offsets` (missing partitions: from their first offset) up to `end_offsets`.

    `database` names the raw table `original_binlog.<database>`; by default the topic's suffix after `binlog.`.
    """
    if shard_rules is None:
        raise ValueError("land(): shard_rules are required to fold physical table names")
    database = database or _database_of(topic)
    ingest = ingest_ts_ms if ingest_ts_ms is not None else int(time.time() * 1000)
    consumer = _consumer(consumer_config)
    try:
        partitions = topic_partitions(consumer, topic)
        ends = capture_end_offsets(consumer_config, topic) if end_offsets == "latest" else dict(end_offsets)
        starts: dict[int, int] = {}
        for p in partitions:
            low, _high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=15, cached=False)
            start = int(start_offsets[p]) if start_offsets and p in start_offsets else low
            end = int(ends.get(p, start))
            if start < low:
                raise LandingError(
                    f"{topic}[{p}]: start offset {start} is before the first retained offset {low}: records were lost"
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
        rows, quarantined = _read(
            consumer, topic, starts, ends, shard_rules, ingest, result, watermarks, timeout_s
        )
    finally:
        consumer.close()

    result.watermarks_ms = watermarks
    result.low_watermark_ms = low_watermark(watermarks)
    _write_rows(spark, table_store, database, rows, result)
    _write_quarantine(spark, table_store, database, quarantined, ingest, result)
    return result


def _database_of(topic: str) -> str:
    if topic.startswith("binlog."):
        return topic[len("binlog.") :]
    raise ValueError(f"cannot tell the source database of topic {topic!r}; pass database=")


def _read(
    consumer: Consumer,
    topic: str,
    starts: dict[int, int],
    ends: dict[int, int],
    rules: ShardRules,
    ingest: int,
    result: LandingResult,
    watermarks: dict[int, int | None],
    timeout_s: float,
) -> tuple[list[dict], list[Quarantined]]:
    rows: list[dict] = []
    quarantined: list[Quarantined] = []
    seen_uids: set[str] = set()
    remaining = {p for p in starts if starts[p] < ends[p]}
    if not remaining:
        return rows, quarantined
    consumer.assign([TopicPartition(topic, p, starts[p]) for p in sorted(remaining)])
    deadline = time.monotonic() + timeout_s
    while remaining:
        if time.monotonic() > deadline:
            where = ", ".join(f"[{p}] at {result.end_offsets[p]} of {ends[p]}" for p in sorted(remaining))
            raise LandingError(f"{topic}: read timed out after {timeout_s:.0f}s: {where}")
        for msg in consumer.consume(1000, timeout=0.5):
            p = msg.partition()
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    if p in remaining and msg.offset() >= ends[p]:
                        result.end_offsets[p] = ends[p]  # a gap (e.g. transaction markers) ended the range
                        remaining.discard(p)
                    continue
                raise LandingError(f"{topic}[{p}]: {err.str()}")
            offset = msg.offset()
            if p not in remaining or offset >= ends[p]:
                continue
            result.read += 1
            result.end_offsets[p] = offset + 1
            ts_type, ts = msg.timestamp()
            parsed = parse_message(
                msg.value(),
                topic,
                p,
                offset,
                rules,
                ingest_ts_ms=ingest,
                timestamp_ms=ts if ts_type else None,
            )
            if isinstance(parsed, Heartbeat):
                result.heartbeats += 1
                watermarks[p] = max(watermarks[p] or 0, parsed.es_ms)
            elif isinstance(parsed, Quarantined):
                quarantined.append(parsed)
            else:
                es = parsed["event_ts_ms"]
                watermarks[p] = max(watermarks[p] or 0, es)
                result.max_event_ts_ms[p] = max(result.max_event_ts_ms.get(p, 0), es)
                result.min_event_ts_ms = (
                    es if result.min_event_ts_ms is None else min(result.min_event_ts_ms, es)
                )
                if parsed["event_uid"] in seen_uids:
                    result.duplicates += 1
                else:
                    seen_uids.add(parsed["event_uid"])
                    rows.append(parsed)
            if offset >= ends[p] - 1:
                remaining.discard(p)
                consumer.pause([TopicPartition(topic, p)])
    return rows, quarantined


def _write_rows(
    spark: SparkSession, store: TableStore, database: str, rows: list[dict], result: LandingResult
) -> None:
    ref = raw_table_ref(database)
    by_partition: dict[tuple[str, str, str], list[dict]] = defaultdict(list)
    for row in rows:
        by_partition[(row["table_name"], row["dt"], row["hour"])].append(row)
    result.touched_hours = sorted(by_partition)
    schema = bs.raw_binlog_ddl_schema()
    for key in result.touched_hours:
        values = dict(zip(bs.RAW_BINLOG_PARTITION_COLUMNS, key, strict=True))
        batch = by_partition[key]
        new_df = spark.createDataFrame(
            [tuple(r[c] for c in DATA_COLUMNS) for r in batch], schema, verifySchema=False
        )
        if store.has_partition(ref, values):
            existing = _read_partition(spark, store, ref, values, schema)
            fresh = new_df.join(existing.select("event_uid"), "event_uid", "left_anti").select(*DATA_COLUMNS)
            fresh_count = fresh.count()
            combined = existing.unionByName(fresh)
        else:
            fresh_count, combined = len(batch), new_df
        result.duplicates += len(batch) - fresh_count
        if fresh_count:
            # One file per hour and table (no small-file pile-up), in binlog order for readers.
            store.write_partition(ref, values, combined.coalesce(1).sortWithinPartitions("binlog_seq"))
            result.landed += fresh_count
            result.written_partitions.append(key)


def _read_partition(
    spark: SparkSession, store: TableStore, ref: TableRef, values: dict[str, str], schema: str
):
    """One partition's data files with a known schema: no table registration, no schema merge over the table."""
    path = store.partition_path(ref, values)
    return spark.read.schema(schema).parquet(path if "://" in path else f"file://{path}")


def _write_quarantine(
    spark: SparkSession,
    store: TableStore,
    database: str,
    records: list[Quarantined],
    ingest: int,
    result: LandingResult,
) -> None:
    result.quarantined = len(records)
    result.quarantine_reasons = dict(Counter(_reason_kind(q.reason) for q in records))
    if not records:
        return
    ref = quarantine_table_ref(database)
    schema = ", ".join(f"{n} {t}" for n, t in QUARANTINE_COLUMNS)
    names = [n for n, _ in QUARANTINE_COLUMNS]
    by_day: dict[str, list[tuple]] = defaultdict(list)
    for q in records:
        # The record's own timestamp fixes the day, so re-landing the same offsets hits the same partition.
        day = _utc(q.timestamp_ms if q.timestamp_ms is not None else ingest).strftime("%Y-%m-%d")
        by_day[day].append((q.reason, q.topic, q.partition, q.offset, q.timestamp_ms, q.value, ingest))
    for day, batch in sorted(by_day.items()):
        values = {"dt": day}
        new_df = spark.createDataFrame(batch, schema)
        if store.has_partition(ref, values):
            existing = _read_partition(spark, store, ref, values, schema)
            keys = ["kafka_topic", "kafka_partition", "kafka_offset"]
            fresh = new_df.join(existing.select(*keys), keys, "left_anti").select(*names)
            if fresh.count() == 0:
                continue
            combined = existing.unionByName(fresh)
        else:
            combined = new_df
        store.write_partition(ref, values, combined.coalesce(1))


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
