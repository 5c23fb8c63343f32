"""Landing a binlog topic into original_binlog.<db>: exact offsets, de-duplication, quarantine, done markers."""

from __future__ import annotations

import datetime as dt
import functools
import json
from pathlib import Path

import pytest

from sharp_dagster.cdc.capture.collector_state import CollectorState, FileStateStore
from sharp_dagster.cdc.change.messages import BinlogMessage, encode
from sharp_dagster.cdc.landing.done_markers import DoneMarkers, day_complete, hours_done, write_done_markers
from sharp_dagster.cdc.landing.kafka_source import LandingError
from sharp_dagster.cdc.landing.land import land
from sharp_dagster.cdc.landing.raw_tables import quarantine_table_ref, raw_table_ref
from sharp_dagster.cdc.source.shards import ShardRules


def raw_rows(table_store, db: str) -> list[dict]:
    ref = raw_table_ref(db)
    parts = table_store.list_partitions(ref)
    if not parts:
        return []
    return [r.asDict() for r in table_store.read_partitions(ref, parts).collect()]


def commits(table_store, ref) -> list[tuple[int, int]]:
    """(snapshot id, records added) of each commit on the table's `main`, oldest first."""
    return [(s["snapshot_id"], s["added_records"]) for s in table_store.history(ref)]


def test_land_collector_output_exactly_once_even_when_relanded_or_replayed(cdc, spark, table_store):
    db = cdc.new_database()
    cdc.sql(
        db,
        "CREATE TABLE user_info_1 (id INT PRIMARY KEY, name VARCHAR(20))",
        "CREATE TABLE user_info_2 (id INT PRIMARY KEY, name VARCHAR(20))",
        "INSERT INTO user_info_1 VALUES (1, 'a'), (2, 'b')",
        "INSERT INTO user_info_2 VALUES (3, 'c')",
        "UPDATE user_info_1 SET id = 20 WHERE id = 2",
        "DELETE FROM user_info_2 WHERE id = 3",
        "ALTER TABLE user_info_2 ADD COLUMN note TEXT",
        "TRUNCATE TABLE user_info_1",
    )
    source = cdc.config(db)
    saved: list[CollectorState] = []

    class Recording(FileStateStore):
        def save(self, state: CollectorState) -> None:
            saved.append(state)
            super().save(state)

    state_path = cdc.tmp_path / "state.json"
    cdc.collector(source, Recording(state_path), flush_max_messages=1).run(once=True)
    topic, rules = f"binlog.{db}", source.databases[0].shard_rules
    records = cdc.read_topic(topic)
    changes = [r for r in records if r["value"]["type"] != "HEARTBEAT"]

    first = land(spark, table_store, cdc.kafka, topic, None, "latest", rules)
    assert (first.read, first.landed, first.duplicates, first.quarantined) == (
        len(records),
        len(changes),
        0,
        0,
    )
    assert first.heartbeats == len(records) - len(changes)
    assert first.end_offsets == {
        p: 1 + max(r["offset"] for r in records if r["partition"] == p) for p in (0, 1)
    }
    rows = raw_rows(table_store, db)
    assert len(rows) == len(changes) and len({r["event_uid"] for r in rows}) == len(rows)
    assert {r["table_name"] for r in rows} == {"user_info"}
    assert sorted(r["op"] for r in rows) == sorted(["ddl", "ddl", "c", "c", "c", "u", "d", "ddl", "t"])
    (key_change,) = [r for r in rows if r["op"] == "u"]
    assert (
        json.loads(key_change["before_json"])["id"] == "2"
        and json.loads(key_change["after_json"])["id"] == "20"
    )
    assert key_change["source_table"] == "user_info_1" and key_change["pk_names"] == ["id"]
    assert {(r["dt"], r["hour"]) for r in rows} == {(t[1], t[2]) for t in first.touched_hours}
    # Every change landed in one commit (the table's only commit that adds rows).
    landed = commits(table_store, raw_table_ref(db))
    assert [added for _, added in landed if added] == [len(changes)]
    assert landed[-1] == (table_store.current_snapshot_id(raw_table_ref(db)), len(changes))

    # Landing the same offsets again changes nothing: not a row, not a commit.
    again = land(spark, table_store, cdc.kafka, topic, first.start_offsets, first.end_offsets, rules)
    assert (again.read, again.landed, again.duplicates, again.written_partitions) == (
        len(records),
        0,
        len(changes),
        [],
    )
    assert commits(table_store, raw_table_ref(db)) == landed
    assert len(raw_rows(table_store, db)) == len(changes)

    # Nothing new after the end offsets.
    idle = land(
        spark,
        table_store,
        cdc.kafka,
        topic,
        first.end_offsets,
        "latest",
        rules,
        prior_watermarks=first.watermarks_ms,
    )
    assert (idle.read, idle.landed) == (0, 0) and idle.watermarks_ms == first.watermarks_ms

    # The collector restarts from an earlier commit (repeats) and picks up a new change: only the new one lands.
    FileStateStore(state_path).save(saved[len(saved) // 2])
    cdc.sql(db, "INSERT INTO user_info_2 VALUES (4, 'd', 'new')")
    cdc.collector(source, FileStateStore(state_path)).run(once=True)
    replay = land(
        spark,
        table_store,
        cdc.kafka,
        topic,
        first.end_offsets,
        "latest",
        rules,
        prior_watermarks=first.watermarks_ms,
    )
    assert replay.landed == 1 and replay.duplicates > 0 and replay.quarantined == 0
    rows = raw_rows(table_store, db)
    assert len(rows) == len(changes) + 1 and len({r["event_uid"] for r in rows}) == len(rows)
    assert commits(table_store, raw_table_ref(db))[:-1] == landed  # one more commit, of the one new change
    assert commits(table_store, raw_table_ref(db))[-1][1] == 1


def _msg(
    table: str,
    pos: int,
    es: dt.datetime,
    kind: str = "INSERT",
    row: dict | None = None,
    database: str = "qdb",
) -> bytes:
    return encode(
        BinlogMessage(
            type=kind,
            source_id="synthetic",
            database=database,
            table=table,
            event_ts_ms=int(es.timestamp() * 1000),
            binlog_file="binlog.000001",
            binlog_pos=pos,
            gtid=f"0-1-{pos}",
            pk_names=["id"],
            data=None if kind == "HEARTBEAT" else (row or {"id": str(pos)}),
        )
    )


def test_bad_messages_are_quarantined_and_counted_once(cdc, spark, table_store):
    topic = f"binlog.{cdc.new_database('qdb')}"
    db = topic.removeprefix("binlog.")
    cdc.create_topic(topic, partitions=1)
    when = dt.datetime(2024, 3, 1, 10, 0, tzinfo=dt.UTC)
    no_identity = json.loads(_msg("user_info_1", 20, when, database=db))
    del no_identity["binlogPos"]
    list_type = json.loads(_msg("user_info_1", 60, when, database=db))
    list_type["type"] = ["INSERT"]
    cdc.produce(
        topic,
        [
            (0, _msg("user_info_1", 10, when, database=db)),
            (0, b"\x00\x01 definitely not json"),
            (0, json.dumps(no_identity).encode()),
            (0, _msg("accounts", 30, when, database=db)),
            (0, _msg("user_info_1", 40, when, kind="MERGE", database=db)),
            (0, _msg("user_info_2", 50, when, database=db)),
            # poison: none of these may stall the topic
            (0, json.dumps(list_type).encode()),
            (0, b"[" * 100_000 + b"]" * 100_000),
            (0, _msg("user_info_1", 70, when, database="billing")),
        ],
        timestamp_ms=int(when.timestamp() * 1000),
    )
    rules = ShardRules.from_mapping({"user_info": r"user_info_(\d+)"})
    result = land(spark, table_store, cdc.kafka, topic, None, "latest", rules)
    assert (result.read, result.landed, result.quarantined) == (9, 2, 7)
    assert result.quarantine_reasons == {
        "not JSON": 2,
        "no binlog identity": 1,
        f"unknown table {db}.accounts": 1,
        "unknown type 'MERGE'": 1,
        "unknown type ['INSERT']": 1,
        "wrong database": 1,
    }
    ref = quarantine_table_ref(db)
    assert table_store.list_partitions(ref) == [{"dt": "2024-03-01"}]
    quarantined = table_store.read_partitions(ref, [{"dt": "2024-03-01"}]).orderBy("kafka_offset").collect()
    assert [(q.kafka_offset, q.reason.split(":")[0]) for q in quarantined] == [
        (1, "not JSON"),
        (2, "no binlog identity"),
        (3, f"unknown table {db}.accounts"),
        (4, "unknown type 'MERGE'"),
        (6, "unknown type ['INSERT']"),
        (7, "not JSON"),
        (8, "wrong database"),
    ]
    assert (
        bytes(quarantined[0].raw_value) == b"\x00\x01 definitely not json"
        and quarantined[0].kafka_topic == topic
    )

    kept = commits(table_store, ref)
    assert [added for _, added in kept if added] == [7]  # the quarantine in one commit
    again = land(spark, table_store, cdc.kafka, topic, result.start_offsets, result.end_offsets, rules)
    assert again.quarantined == 7 and again.landed == 0
    assert table_store.read_partitions(ref, [{"dt": "2024-03-01"}]).count() == 7
    assert commits(table_store, ref) == kept, "re-landing committed to the quarantine again"

    with pytest.raises(LandingError, match="beyond the end offset"):
        land(spark, table_store, cdc.kafka, topic, {0: 99}, "latest", rules)


def test_done_markers_follow_the_low_watermark_across_partitions(cdc, spark, table_store):
    db = cdc.new_database("wm")
    msg = functools.partial(_msg, database=db)
    topic = f"binlog.{db}"
    cdc.create_topic(topic, partitions=2)
    rules = ShardRules.from_mapping({"user_info": r"user_info_(\d+)"})
    warehouse = table_store.warehouse_dir
    day = dt.datetime(2024, 3, 1, tzinfo=dt.UTC)
    since = int(day.timestamp() * 1000)
    lateness = 15
    state = {"offsets": None, "watermarks": None}

    def step(records: list[tuple[int, bytes]]) -> list[tuple[str, str]]:
        cdc.produce(topic, records)
        result = land(
            spark,
            table_store,
            cdc.kafka,
            topic,
            state["offsets"],
            "latest",
            rules,
            database=db,
            prior_watermarks=state["watermarks"],
        )
        state["offsets"], state["watermarks"] = result.end_offsets, result.watermarks_ms
        return write_done_markers(warehouse, db, result.low_watermark_ms, lateness, since)

    at = lambda h, m, d=0: day + dt.timedelta(days=d, hours=h, minutes=m)  # noqa: E731

    # Partition 1 has shown no event time yet: nothing can be done, however far partition 0 got.
    assert step([(0, msg("user_info_1", 100, at(0, 10))), (0, msg("user_info_1", 200, at(5, 20)))]) == []
    assert state["watermarks"][1] is None
    # Partition 1 at 00:30: the low watermark 00:30 < 01:00 + 15 min.
    assert step([(1, msg("user_info_2", 300, at(0, 30)))]) == []
    # A heartbeat moves partition 1 to 01:20: hour 00 is done (01:15 <= 01:20), hour 01 is not.
    assert step([(1, msg("", 0, at(1, 20), kind="HEARTBEAT"))]) == [("2024-03-01", "00")]
    assert hours_done(warehouse, db, "2024-03-01") == ["00"]
    # Late heartbeats at 00:14 the next day: hours up to 22 are done, hour 23 waits for 00:15.
    written = step(
        [(0, msg("", 0, at(0, 14, 1), kind="HEARTBEAT")), (1, msg("", 0, at(0, 20, 1), kind="HEARTBEAT"))]
    )
    assert written == [("2024-03-01", f"{h:02d}") for h in range(1, 23)]
    assert not day_complete(warehouse, db, "2024-03-01")
    assert step([(0, msg("", 0, at(0, 15, 1), kind="HEARTBEAT"))]) == [("2024-03-01", "23")]
    assert day_complete(warehouse, db, "2024-03-01")
    assert DoneMarkers(warehouse, db).hours_done("2024-03-02") == []
    marker = json.loads(Path(DoneMarkers(warehouse, db).marker_path("2024-03-01", "23")).read_text())
    assert marker["lateness_minutes"] == lateness and marker["low_watermark_ms"] == int(
        at(0, 15, 1).timestamp() * 1000
    )
    # Markers are written once: the same watermark writes nothing new.
    assert write_done_markers(warehouse, db, state_low(state), lateness, since) == []

    rows = raw_rows(table_store, db)
    assert sorted((r["dt"], r["hour"], r["source_table"]) for r in rows) == [
        ("2024-03-01", "00", "user_info_1"),
        ("2024-03-01", "00", "user_info_2"),
        ("2024-03-01", "05", "user_info_1"),
    ]


def state_low(state: dict) -> int:
    return min(state["watermarks"].values())


def test_cli_land_keeps_offsets_and_watermarks_between_runs(cdc, spark, table_store, capsys):
    import yaml

    from sharp_dagster.cli.cdc import main

    db = cdc.new_database()
    cdc.sql(db, "CREATE TABLE user_info_1 (id INT PRIMARY KEY)", "INSERT INTO user_info_1 VALUES (1), (2)")
    source = cdc.config(db)
    cdc.collector(source).run(once=True)
    config = cdc.tmp_path / "source.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "source_id": source.source_id,
                "lateness_minutes": source.lateness_minutes,
                "databases": [
                    {
                        "name": db,
                        "tables": [
                            {"name": "user_info", "shard_regex": r"user_info_(\d+)", "primary_key": ["id"]}
                        ],
                    }
                ],
            }
        )
    )
    state = cdc.tmp_path / "landing.json"
    argv = [
        "land",
        "--config",
        str(config),
        "--database",
        db,
        "--bootstrap-servers",
        cdc.broker.bootstrap_servers,
    ]
    argv += ["--state-file", str(state), "--warehouse", table_store.warehouse_dir]
    assert main(argv) == 0
    first = json.loads(state.read_text())
    assert "landed 3, duplicates 0, quarantined 0" in capsys.readouterr().out  # CREATE TABLE and two inserts
    low = min(first["watermarks"].values())
    day = dt.datetime.fromtimestamp(first["first_event_ts_ms"] / 1000, tz=dt.UTC)
    day_start = day.replace(hour=0, minute=0, second=0, microsecond=0)
    expected = [
        f"{h:02d}"
        for h in range(24)
        if (day_start + dt.timedelta(hours=h + 1, minutes=source.lateness_minutes)).timestamp() * 1000 <= low
    ]
    assert hours_done(table_store.warehouse_dir, db, day_start.strftime("%Y-%m-%d")) == expected

    assert main(argv) == 0
    assert "read 0, landed 0" in capsys.readouterr().out
    assert json.loads(state.read_text())["offsets"] == first["offsets"]


def test_parsing_runs_on_the_executors_and_a_rerun_reads_the_same_records(
    cdc, spark, table_store, monkeypatch
):
    """The driver never parses (its parser is broken here; the executors' Python workers import their own), and
    landing the recorded range again reads exactly that range, however many records arrived since."""
    from sharp_dagster.cdc.change import messages

    def driver_must_not_parse(*args, **kwargs):
        raise AssertionError("parse_message was called in the driver")

    monkeypatch.setattr(messages, "parse_message", driver_must_not_parse)
    db = cdc.new_database("exe")
    topic = f"binlog.{db}"
    cdc.create_topic(topic, partitions=2)
    rules = ShardRules.from_mapping({"user_info": r"user_info_(\d+)"})
    when = dt.datetime(2024, 5, 1, 7, 30, tzinfo=dt.UTC)
    msg = functools.partial(_msg, database=db)
    first_batch = [
        (0, msg("user_info_1", 10, when)),
        (0, msg("user_info_1", 10, when)),  # replayed by the collector: the same change twice
        (0, b"not json"),
        (1, msg("user_info_2", 20, when + dt.timedelta(minutes=5))),
        (1, msg("", 0, when + dt.timedelta(minutes=40), kind="HEARTBEAT")),
    ]
    cdc.produce(topic, first_batch, timestamp_ms=int(when.timestamp() * 1000))
    first = land(spark, table_store, cdc.kafka, topic, None, "latest", rules)
    assert (first.read, first.landed, first.duplicates, first.quarantined, first.heartbeats) == (
        5,
        2,
        1,
        1,
        1,
    )
    assert first.end_offsets == {0: 3, 1: 2} and first.start_offsets == {0: 0, 1: 0}
    es = int(when.timestamp() * 1000)
    assert first.watermarks_ms == {0: es, 1: es + 40 * 60_000} and first.low_watermark_ms == es
    assert first.max_event_ts_ms == {0: es, 1: es + 5 * 60_000} and first.min_event_ts_ms == es
    assert first.touched_hours == [("user_info", "2024-05-01", "07")]
    assert sorted(r["kafka_offset"] for r in raw_rows(table_store, db) if r["kafka_partition"] == 0) == [0]

    cdc.produce(topic, [(0, msg("user_info_1", 30, when)), (1, msg("user_info_2", 40, when)), (1, b"{}")])
    again = land(spark, table_store, cdc.kafka, topic, first.start_offsets, first.end_offsets, rules)
    same = ("read", "heartbeats", "quarantined", "quarantine_reasons", "end_offsets", "watermarks_ms")
    assert {k: getattr(again, k) for k in same} == {k: getattr(first, k) for k in same}
    assert (again.landed, again.duplicates, again.written_partitions) == (0, 3, [])

    rest = land(spark, table_store, cdc.kafka, topic, first.end_offsets, "latest", rules)
    assert (rest.read, rest.landed, rest.quarantined, rest.end_offsets) == (3, 2, 1, {0: 4, 1: 4})
    assert len(raw_rows(table_store, db)) == 4
