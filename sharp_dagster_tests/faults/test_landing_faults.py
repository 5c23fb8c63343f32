"""Faults 8 and 11: the hourly landing (real Apache Kafka broker, real Spark Kafka source, real job log).

8. The broker is restarted while a landing runs (killed once the landing fixed its end offsets, started again on
   the same log dirs at once). The landing either rides the restart or fails fast recording no offsets; re-run if
   it failed, the day's raw rows equal the day's changes, row for row: nothing lost, nothing landed twice.
11. Poison messages in the topic (not JSON, a list `type`, an event time out of range, nesting 100k deep, another
   database) are quarantined with their reason and offset; the landing goes on (SUCCESS) and lands every real
   change of the day.

The oracle is the generated source itself: each change of a day is one binlog message at position 4 + 100 * seq.
Neither fault is about the job log's backend: each runs on one (`on_backend`; both with
SHARP_FAULTS_BOTH_BACKENDS=1).
"""

from __future__ import annotations

import json
import time

from sharp_dagster.demo.generator import read_changes
from sharp_dagster.joblog import FAILURE, SUCCESS
from sharp_dagster.settings import Settings
from sharp_dagster_tests.faults.harness import D4, D5, on_backend, record


def _landing_name(world) -> str:
    return f"original_binlog/{world.feed.database}"


def _landings(world) -> list:
    return sorted(world.job_log().recent(_landing_name(world), limit=100), key=lambda r: r.job_start_time)


def _expected_raw(day: str) -> list[tuple[str, int]]:
    """(physical source table, binlog position) of every change of `day`, from the generated source."""
    changes = read_changes(Settings.from_env().sample_dir, day)
    return sorted((c["_source_table"], 4 + 100 * int(c["_seq"])) for c in changes)


def _landed_raw(world, day: str) -> list[tuple[str, int]]:
    from sharp_dagster.cdc.landing.raw_tables import raw_table_ref

    tables = world.tables()
    name = tables.name(raw_table_ref(world.feed.database))
    tables.spark.catalog.refreshTable(name)
    rows = tables.spark.table(name).where(f"dt = '{day}'").select("source_table", "binlog_pos", "event_uid")
    rows = rows.collect()
    assert len({r.event_uid for r in rows}) == len(rows), f"{day}: a change was landed twice"
    return sorted((r.source_table, int(r.binlog_pos)) for r in rows)


@on_backend("postgresql")
def test_broker_restarted_mid_landing(world, monkeypatch):
    from sharp_dagster.cdc.landing import land as landing

    day = D4
    before = len(_landings(world))
    read = landing._read
    ends: list[dict] = []

    def kill_during_read(consumer, errors, topic, starts, end_offsets, *rest):
        ends.append(dict(end_offsets))
        world.broker.kill()  # a crash, with the run's end offsets fixed and nothing read yet
        return read(consumer, errors, topic, starts, end_offsets, *rest)

    monkeypatch.setattr(landing, "_read", kill_during_read)
    started = time.monotonic()
    try:
        world.feed.land(day)
        first_failed = False
    except AssertionError as exc:
        first_failed = True
        assert "unreachable" in str(exc), str(exc)
    finally:
        monkeypatch.setattr(landing, "_read", read)
        world.broker.start()  # back on the same ports and log dirs
    assert ends and sum(ends[0].values()) > 0, "the landing never reached the broker"

    runs = _landings(world)[before:]
    if first_failed:
        assert runs[0].status == FAILURE and runs[0].range_end in (None, runs[0].range_start), (
            "the failed landing recorded offsets"
        )
        world.feed.land(day, replay=False)  # the messages are still in the restarted broker
        runs = _landings(world)[before:]
    recovery_s = time.monotonic() - started
    assert runs[-1].status == SUCCESS
    assert json.loads(runs[-1].range_end)[world.feed.topic] == {str(p): o for p, o in ends[0].items()}
    expected = _expected_raw(day)
    assert _landed_raw(world, day) == expected, f"{day}: the landed rows differ from the day's changes"
    record(
        "8 broker restarted mid-landing",
        world.backend,
        table=f"original_binlog.{world.feed.database}",
        day=day,
        first_landing="FAILURE" if first_failed else "SUCCESS",
        recovery_s=recovery_s,
        rows_compared=len(expected),
    )


def _poison(world) -> dict[str, bytes]:
    from sharp_dagster.cdc.change.messages import BinlogMessage, encode

    good = BinlogMessage(
        type="INSERT",
        source_id=world.feed.source.source_id,
        database=world.feed.database,
        table="product",
        event_ts_ms=1704326400000,
        binlog_file="mysql-bin.000001",
        binlog_pos=999_999_904,
        pk_names=["product_id"],
        data={"product_id": "999"},
    )
    flat = json.loads(encode(good))
    return {
        "not json": b"\x00\x01 definitely not json",
        "list type": json.dumps({**flat, "type": ["INSERT"]}).encode(),
        "es out of range": json.dumps({**flat, "es": 10**30}).encode(),
        "nested 100k deep": b"[" * 100_000 + b"]" * 100_000,
        "another database": json.dumps({**flat, "database": "not_this_topics_db"}).encode(),
    }


@on_backend("sqlite")
def test_poison_messages_are_quarantined_and_the_landing_goes_on(world):
    from confluent_kafka import Producer

    from sharp_dagster.cdc.landing.raw_tables import quarantine_table_ref

    day = D5
    before = len(_landings(world))
    offsets: dict[str, int] = {}
    producer = Producer({"bootstrap.servers": world.feed.bootstrap})
    for label, value in _poison(world).items():

        def delivered(err, msg, label=label):
            assert err is None, err
            offsets[label] = msg.offset()

        producer.produce(world.feed.topic, value, partition=0, on_delivery=delivered)
    assert producer.flush(60) == 0 and len(offsets) == 5

    started = time.monotonic()
    world.feed.land(day)  # raises when the landing fails
    landed_s = time.monotonic() - started
    runs = _landings(world)[before:]
    assert [r.status for r in runs] == [SUCCESS]

    tables = world.tables()
    name = tables.name(quarantine_table_ref(world.feed.database))
    tables.spark.catalog.refreshTable(name)
    kept = {
        int(r.kafka_offset): r.reason
        for r in tables.spark.table(name)
        .where(f"kafka_topic = '{world.feed.topic}' AND kafka_partition = 0")
        .where(f"kafka_offset IN ({', '.join(str(o) for o in offsets.values())})")
        .collect()
    }
    missing = {label: o for label, o in offsets.items() if o not in kept}
    assert not missing, f"not quarantined: {missing}"
    assert all(kept[o] for o in offsets.values()), kept
    assert (
        "not_this_topics_db" in kept[offsets["another database"]]
        or "database" in kept[offsets["another database"]]
    )
    expected = _expected_raw(day)
    assert _landed_raw(world, day) == expected, f"{day}: the landed rows differ from the day's changes"
    record(
        "11 poison messages in the topic",
        world.backend,
        table=f"original_binlog.{world.feed.database}",
        day=day,
        quarantined=len(kept),
        reasons={label: kept[o][:80] for label, o in offsets.items()},
        recovery_s=landed_s,
        rows_compared=len(expected),
    )
