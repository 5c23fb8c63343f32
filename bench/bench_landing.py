"""Benchmark of the hourly landing: Spark's Kafka batch source with parsing on the executors against the old loop.

N binlog messages (row changes of 4 sharded tables over 2 hours, one heartbeat per 1,000 messages per partition,
0.1% bad records that go to quarantine) are produced once into a real Apache Kafka broker on loopback
(`LocalBroker`, a topic of 2 partitions). Then, in one Spark session on `local[2]` (2 cores) and after a warm-up
landing of a small topic by each method, the same range is landed twice, each time into an empty warehouse of its
own:

- `old_driver_loop`: the landing as it was before (a librdkafka consumer in the driver, `parse_message` in the
  driver, every row gathered into a Python list, then `createDataFrame` per partition); copied below from the
  project's history as the baseline, nothing else uses it;
- `spark_landing`: `sharp_dagster.cdc.landing.land.land` (Spark's Kafka source, the parser on the executors over Arrow
  batches with `mapInArrow`, aggregates collected), which also writes each table's typed images; their share is
  timed alone afterwards (`typed_images_alone`: the same landed rows into a fresh warehouse).

Both must land the same rows and quarantine the same records. Reported: seconds and messages per second of each,
and the ratio.

    .venv/bin/python bench/bench_landing.py [--quick] [--messages N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition  # noqa: E402

from sharp_dagster.cdc.capture.kafka_topics import ensure_topic  # noqa: E402
from sharp_dagster.cdc.change import binlog_schema as bs  # noqa: E402
from sharp_dagster.cdc.change.messages import BinlogMessage, Heartbeat, Quarantined, encode, parse_message  # noqa: E402
from sharp_dagster.cdc.landing import kafka_source as landing_kafka  # noqa: E402
from sharp_dagster.cdc.landing import land as landing  # noqa: E402
from sharp_dagster.cdc.landing import parser as landing_parser  # noqa: E402
from sharp_dagster.cdc.landing import raw_tables  # noqa: E402
from sharp_dagster.cdc.landing.image_tables import write_typed_images  # noqa: E402
from sharp_dagster.cdc.source.shards import ShardRules  # noqa: E402

DB = "benchdb"
TABLES = ("user_info", "orders", "product", "order_item")
SHARDS = 4
PARTITIONS = 2
HOUR0_MS = 1_714_550_400_000  # 2024-05-01T08:00:00Z
RULES = ShardRules.from_mapping({t: rf"{t}_(\d+)" for t in TABLES})


# ------------------------------------------------------------------------------------------------ data
def messages(n: int) -> list[tuple[int, bytes]]:
    """(partition, value) of n records, the same for every run."""
    out: list[tuple[int, bytes]] = []
    for i in range(n):
        p = i % PARTITIONS
        es = HOUR0_MS + (i * 7_200_000) // n  # two hours of changes, in order
        if i % (1000 * PARTITIONS) < PARTITIONS:
            kind, table, data = "HEARTBEAT", "", None
        else:
            kind = ("INSERT", "UPDATE", "DELETE")[i % 10 % 3] if i % 10 < 3 else "INSERT"
            table = f"{TABLES[i % len(TABLES)]}_{i % SHARDS + 1}"
            data = {
                "id": str(i),
                "name": f"name-{i}",
                "amount": f"{i % 10000}.{i % 100:02d}",
                "status": ("NEW", "PAID", "SHIPPED")[i % 3],
                "updated_at": "2024-05-01 08:00:00",
            }
        if i % 1000 == 999:
            out.append((p, b'{"type": "INSERT", "broken": '))  # bad JSON: quarantined
            continue
        msg = BinlogMessage(
            type=kind,
            source_id="bench",
            database=DB,
            table=table,
            event_ts_ms=es,
            binlog_file="mysql-bin.000001",
            binlog_pos=4 + i * 100,
            gtid=f"0-1-{i}",
            pk_names=["id"] if data else [],
            data=data,
            old={"status": "NEW"} if kind == "UPDATE" else None,
            ts=es + 5,
        )
        out.append((p, encode(msg)))
    return out


def produce(servers: str, topic: str, records: list[tuple[int, bytes]]) -> None:
    producer = Producer(
        {"bootstrap.servers": servers, "linger.ms": 20, "batch.size": 1_000_000, "compression.type": "lz4"}
    )
    for p, value in records:
        while True:
            try:
                producer.produce(topic, value=value, partition=p)
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(120) == 0, "not every message was delivered"


# ------------------------------------------------------------------------------------------------ baseline
# The old driver loop (sharp_dagster/cdc/landing/land.py before the Spark Kafka source), kept here only as the baseline.
def old_land(spark, store, consumer_config, topic, shard_rules, database, timeout_s=600.0):
    ingest = int(time.time() * 1000)
    errors = landing_kafka.BrokerErrors(consumer_config["bootstrap.servers"])
    consumer = landing_kafka.landing_consumer(consumer_config, errors)
    try:
        partitions = landing_kafka.topic_partitions(consumer, topic)
        ends = landing_kafka.capture_end_offsets(consumer_config, topic)
        starts = {}
        for p in partitions:
            low, _ = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=15, cached=False)
            starts[p] = low
        result = landing.LandingResult(
            topic=topic, database=database, start_offsets=dict(starts), end_offsets=dict(starts)
        )
        watermarks = {p: None for p in partitions}
        rows, quarantined = _old_read(
            consumer, errors, topic, starts, ends, shard_rules, ingest, result, watermarks, timeout_s
        )
    except KafkaException as exc:
        errors.raise_if_any(topic)
        raise landing_kafka.LandingError(f"{topic}: {exc}") from exc
    finally:
        consumer.close()
    result.watermarks_ms = watermarks
    result.low_watermark_ms = landing.low_watermark(watermarks)
    _old_write_rows(spark, store, database, rows, result)
    _old_write_quarantine(spark, store, database, quarantined, ingest, result)
    return result


def _old_read(consumer, errors, topic, starts, ends, rules, ingest, result, watermarks, timeout_s):
    rows, quarantined, seen_uids = [], [], set()
    remaining = {p for p in starts if starts[p] < ends[p]}
    if not remaining:
        return rows, quarantined
    consumer.assign([TopicPartition(topic, p, starts[p]) for p in sorted(remaining)])
    deadline = time.monotonic() + timeout_s
    while remaining:
        if time.monotonic() > deadline:
            raise landing_kafka.LandingError(f"{topic}: read timed out after {timeout_s:.0f}s")
        batch = consumer.consume(1000, timeout=0.5)
        if not batch:
            errors.raise_if_any(topic)
        for msg in batch:
            p = msg.partition()
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    if p in remaining and msg.offset() >= ends[p]:
                        result.end_offsets[p] = ends[p]
                        remaining.discard(p)
                    continue
                raise landing_kafka.LandingError(f"{topic}[{p}]: {err.str()}")
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
                expected_database=result.database,
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


def _old_write_rows(spark, store, database, rows, result):
    ref = raw_tables.raw_table_ref(database)
    by_partition = defaultdict(list)
    for row in rows:
        by_partition[(row["table_name"], row["dt"], row["hour"])].append(row)
    result.touched_hours = sorted(by_partition)
    schema = bs.raw_binlog_ddl_schema()
    for key in result.touched_hours:
        values = dict(zip(bs.RAW_BINLOG_PARTITION_COLUMNS, key, strict=True))
        batch = by_partition[key]
        new_df = spark.createDataFrame(
            [tuple(r[c] for c in landing.DATA_COLUMNS) for r in batch], schema, verifySchema=False
        )
        if store.has_partition(ref, values):
            existing = store.read_partitions(ref, [values]).drop(*bs.RAW_BINLOG_PARTITION_COLUMNS)
            fresh = new_df.join(existing.select("event_uid"), "event_uid", "left_anti").select(
                *landing.DATA_COLUMNS
            )
            fresh_count = fresh.count()
            combined = existing.unionByName(fresh)
        else:
            fresh_count, combined = len(batch), new_df
        result.duplicates += len(batch) - fresh_count
        if fresh_count:
            store.write_partition(ref, values, combined.coalesce(1).sortWithinPartitions("binlog_seq"))
            result.landed += fresh_count
            result.written_partitions.append(key)


def _old_write_quarantine(spark, store, database, records, ingest, result):
    result.quarantined = len(records)
    result.quarantine_reasons = dict(Counter(landing_parser.reason_kind(q.reason) for q in records))
    if not records:
        return
    ref = raw_tables.quarantine_table_ref(database)
    schema = ", ".join(f"{n} {t}" for n, t in raw_tables.QUARANTINE_COLUMNS)
    by_day = defaultdict(list)
    for q in records:
        day = landing_parser.utc_datetime(q.timestamp_ms if q.timestamp_ms is not None else ingest).strftime(
            "%Y-%m-%d"
        )
        by_day[day].append((q.reason, q.topic, q.partition, q.offset, q.timestamp_ms, q.value, ingest))
    for day, batch in sorted(by_day.items()):
        store.write_partition(ref, {"dt": day}, spark.createDataFrame(batch, schema).coalesce(1))


# ------------------------------------------------------------------------------------------------ run
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="5,000 messages: a smoke test of the benchmark")
    parser.add_argument("--messages", type=int, default=None)
    args = parser.parse_args(argv)
    n = args.messages or (5_000 if args.quick else 200_000)

    work = Path(tempfile.mkdtemp(prefix="bench_landing_"))
    os.environ["SHARP_DATA_DIR"] = str(work / "data")
    os.environ.setdefault("SHARP_SPARK_MASTER", "local[2]")
    from sharp_dagster.servers.broker import LocalBroker
    from sharp_dagster.spark.iceberg import warehouse_tables
    from sharp_dagster.spark.session import build_spark_session

    def fresh_store(spark, folder: Path):  # a fresh warehouse of its own, its catalog beside it
        folder.mkdir(parents=True, exist_ok=True)
        settings = SimpleNamespace(
            warehouse_dir=folder / "warehouse", log_db_url=f"sqlite:///{folder / 'log.db'}"
        )
        return warehouse_tables(spark, settings)

    broker = LocalBroker(base_dir=work / "kafka").start()
    try:
        config = {"bootstrap.servers": broker.bootstrap_servers}
        topic, warm_topic = f"binlog.{DB}", f"binlog.{DB}_warm"
        for t in (topic, warm_topic):
            ensure_topic(config, t, PARTITIONS)
        t0 = time.monotonic()
        records = messages(n)
        produce(broker.bootstrap_servers, topic, records)
        produce(broker.bootstrap_servers, warm_topic, records[:2000])
        produce_s = time.monotonic() - t0

        spark = build_spark_session(app_name="bench_landing")
        cores = spark.sparkContext.defaultParallelism
        runs = {
            "old_driver_loop": lambda store, t: old_land(spark, store, config, t, RULES, DB),
            "spark_landing": lambda store, t: landing.land(
                spark, store, config, t, None, "latest", RULES, database=DB
            ),
        }
        for name, run in runs.items():  # warm-up: JIT, Python workers, first writes
            run(fresh_store(spark, work / f"warm_{name}"), warm_topic)
        out: dict = {
            "messages": n,
            "kafka_partitions": PARTITIONS,
            "spark_cores": cores,
            "produce_s": round(produce_s, 1),
        }
        results, stores = {}, {}
        for name, run in runs.items():
            store = stores[name] = fresh_store(spark, work / name)
            t0 = time.monotonic()
            result = run(store, topic)
            seconds = time.monotonic() - t0
            results[name] = result
            out[name] = {
                "seconds": round(seconds, 2),
                "messages_per_s": round(n / seconds),
                "read": result.read,
                "landed": result.landed,
                "duplicates": result.duplicates,
                "quarantined": result.quarantined,
                "heartbeats": result.heartbeats,
                "written_partitions": len(result.written_partitions),
            }
            print(name, out[name], flush=True)
        # The typed images (`image_tables`) are part of `spark_landing`: their share, timed alone over the same
        # landed rows into a fresh warehouse (JSON columns typed by their values, one commit per table).
        landed_store = stores["spark_landing"]
        raw = landed_store.spark.table(landed_store.name(raw_tables.raw_table_ref(DB))).localCheckpoint(
            eager=True
        )
        tables = sorted({t for t, _, _ in results["spark_landing"].touched_hours})
        images_store = fresh_store(spark, work / "images_only")
        t0 = time.monotonic()
        written = write_typed_images(images_store, DB, raw, tables)
        out["typed_images_alone"] = {
            "seconds": round(time.monotonic() - t0, 2),
            "rows": sum(written.values()),
            "tables": len(written),
        }
        out["typed_images_share_of_spark_landing"] = round(
            out["typed_images_alone"]["seconds"] / out["spark_landing"]["seconds"], 2
        )
        old, new = results["old_driver_loop"], results["spark_landing"]
        same = (
            "read",
            "landed",
            "duplicates",
            "quarantined",
            "heartbeats",
            "quarantine_reasons",
            "end_offsets",
        )
        out["same_result"] = all(getattr(old, k) == getattr(new, k) for k in same) and sorted(
            old.touched_hours
        ) == sorted(new.touched_hours)
        out["speedup_spark_over_old"] = round(
            out["old_driver_loop"]["seconds"] / out["spark_landing"]["seconds"], 2
        )
        print(json.dumps(out, indent=2))
        return 0 if out["same_result"] else 1
    finally:
        broker.cleanup()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
