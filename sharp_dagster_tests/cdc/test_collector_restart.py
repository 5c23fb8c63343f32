"""The collector as a process: killed mid-stream and restarted it loses nothing and the landing keeps every change
once; running as a service it streams new changes and stops cleanly on SIGTERM; no password leaks. Its resume
position is in the job-log database (`SHARP_LOG_DB_URL`), fenced per collector, read from an old local file once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from pyspark.sql import functions as F

from sharp_dagster.cdc.capture.collector_db import DbStateStore, saved_position
from sharp_dagster.cdc.capture.collector_state import CollectorError, CollectorState, FileStateStore
from sharp_dagster.cdc.change import binlog_schema as bs
from sharp_dagster.cdc.landing.land import land
from sharp_dagster.cdc.landing.raw_tables import raw_table_ref
from sharp_dagster.cdc.merge.change_source import day_changes
from sharp_dagster.cdc.merge.fold import merge_day, published
from sharp_dagster.warehouse.cdc_layout import SHARD_COLUMN

PASSWORD = "pw-Secret-4711"
USER = "cdc_reader"
SOURCE = "test-mariadb"


def _gtid_seq(gtid: str) -> int:
    return int(gtid.rsplit("-", 1)[1])


def _write_config(cdc, db: str, path: Path) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "source_id": "test-mariadb",
                "replica_server_id": 6001,
                "topic_partitions": 2,
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
    return path


def _collect_cmd(cdc, config: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "sharp_dagster.cli.cdc",
        "collect",
        "--config",
        str(config),
        "--host",
        cdc.mariadb.host,
        "--port",
        str(cdc.mariadb.port),
        "--user",
        USER,
        "--bootstrap-servers",
        cdc.broker.bootstrap_servers,
        "--start",
        cdc.start_gtid,
        *extra,
    ]


def _env(db_url: str) -> dict[str, str]:
    return {**os.environ, "SHARP_CDC_MYSQL_PASSWORD": PASSWORD, "SHARP_LOG_DB_URL": db_url}


def _db_url(cdc) -> str:
    return f"sqlite:///{cdc.tmp_path / 'log.db'}"


def _saved(db_url: str) -> CollectorState | None:
    try:
        return saved_position(db_url, SOURCE)
    except Exception:  # the collector is creating the schema
        return None


def _wait_for(predicate, timeout: float, what: str, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if proc is not None and proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"collector exited ({proc.returncode}) before {what}: {err[-2000:]}")
        time.sleep(0.005)
    raise AssertionError(f"timed out waiting for {what}")


def test_sigkill_mid_stream_then_restart_delivers_every_change_once_downstream(cdc, spark, table_store):
    """Two days of changes (the source's clock set per statement), the last a transaction larger than the
    collector's memory for one (held on disk); the collector killed mid-stream and restarted; landed and merged
    day by day, the ODS equals the source at each day's end."""
    db = cdc.new_database()
    cdc.mariadb.create_user(USER, PASSWORD)
    n_txn, per_txn, big = 300, 10, 6000
    statements = [
        _at(DAYS[0], 0),
        "CREATE TABLE user_info_1 (id INT PRIMARY KEY, v INT)",
        "CREATE TABLE user_info_2 (id INT PRIMARY KEY, v INT)",
    ]
    for t in range(n_txn):
        shard = 1 + t % 2
        values = ", ".join(f"({t * per_txn + r}, {r})" for r in range(per_txn))
        statements += [
            _at(DAYS[t * 2 // n_txn], 1 + t % 20),
            f"INSERT INTO user_info_{shard} VALUES {values}",
        ]
    day_one = 3 + 2 * (n_txn // 2)  # the CREATEs, then a SET and an INSERT per transaction
    cdc.sql(db, *statements[:day_one])
    at_day_end = {DAYS[0]: _source_rows(cdc, db)}
    updates = [f"UPDATE user_info_{1 + t % 2} SET v = v + 100 WHERE id = {t * per_txn}" for t in range(n_txn)]
    # One transaction of 6000 rows, over 2 MB of messages: more than --txn-memory-mb 1.5 holds in memory.
    rows = ", ".join(f"({100_000 + r}, {r})" for r in range(big))
    cdc.sql(
        db,
        *statements[day_one:],
        *updates,
        _at(DAYS[1], 23),
        f"INSERT INTO user_info_1 VALUES {rows}",
    )
    at_day_end[DAYS[1]] = _source_rows(cdc, db)
    expected_changes = n_txn * per_txn + n_txn + big + 2  # row changes and the two CREATE TABLE statements
    final_gtid = cdc.gtid_pos()

    config = _write_config(cdc, db, cdc.tmp_path / "source.yaml")
    db_url = _db_url(cdc)
    proc = subprocess.Popen(
        _collect_cmd(cdc, config, "--once", "--flush-every", "20", "--txn-memory-mb", "1.5"),
        env=_env(db_url),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for(lambda: _saved(db_url) is not None, 60, "the first saved commit", proc)
    finally:
        if proc.poll() is None:  # (one that exited is reported by _wait_for)
            os.kill(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    killed_at = saved_position(db_url, SOURCE)
    assert killed_at is not None
    assert _gtid_seq(killed_at.gtid_pos) < _gtid_seq(final_gtid), (
        "the kill came after the end: nothing was tested"
    )
    before_restart = cdc.changes(f"binlog.{db}")
    assert len(before_restart) < expected_changes
    # Sent after the last saved commit, before the kill: the restart must send exactly these again.
    unsaved = [m for m in before_restart if _gtid_seq(m["gtid"]) > _gtid_seq(killed_at.gtid_pos)]

    restart = subprocess.run(
        _collect_cmd(cdc, config, "--once", "--txn-memory-mb", "1.5"),
        env=_env(db_url),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert restart.returncode == 0, restart.stderr[-2000:]
    assert "stopped by eof" in restart.stdout
    assert "(1 held on disk)" in restart.stdout  # the big transaction, sent whole after its commit
    assert PASSWORD not in restart.stdout + restart.stderr
    assert saved_position(db_url, SOURCE).gtid_pos == final_gtid

    msgs = cdc.changes(f"binlog.{db}")
    uids: dict[str, list[dict]] = {}
    for m in msgs:
        uid = bs.event_uid(m["sourceId"], m["binlogFile"], m["binlogPos"], m["rowIdx"])
        uids.setdefault(uid, []).append(m)
    # Nothing lost, and every repeat is the same change under the same identity: de-duplication is exact.
    assert len(uids) == expected_changes
    assert len(msgs) - expected_changes == len(unsaved)
    for copies in uids.values():
        assert (
            len(
                {
                    json.dumps({k: v for k, v in c.items() if k not in ("id", "ts")}, sort_keys=True)
                    for c in copies
                }
            )
            == 1
        )
    inserted = {int(m["data"][0]["id"]) for m in msgs if m["type"] == "INSERT"}
    assert inserted == set(range(n_txn * per_txn)) | set(range(100_000, 100_000 + big))
    updated = {int(m["data"][0]["id"]) for m in msgs if m["type"] == "UPDATE"}
    assert updated == {t * per_txn for t in range(n_txn)}
    assert all("commitTs" in m for m in msgs)

    # Downstream the repeats are dropped by identity: the landing keeps each change once (and the merge applies
    # a change once, test_merge_rules.test_duplicates_are_applied_once).
    topic = f"binlog.{db}"
    result = land(spark, table_store, cdc.kafka, topic, None, "latest", _rules(db), database=db)
    assert (result.landed, result.duplicates) == (expected_changes, len(unsaved))
    ref = raw_table_ref(db)
    rows = table_store.read_partitions(ref, table_store.list_partitions(ref)).select("event_uid").collect()
    assert len(rows) == len({r.event_uid for r in rows}) == expected_changes

    # Merged day by day as the ODS asset merges them: the source as it stood at each day's end.
    state = None
    for day in DAYS:
        changes, _, events = day_changes(table_store, ref, db, "user_info", day)
        keys = [SHARD_COLUMN, "id"]
        state = merge_day(state, changes, keys, shard_column=SHARD_COLUMN, events=events).localCheckpoint()
        merged = published(state).select(*[F.col(c).cast("string") for c in (SHARD_COLUMN, "id", "v")])
        assert sorted(tuple(r) for r in merged.collect()) == at_day_end[day], day


DAYS = ("2024-07-01", "2024-07-02")


def _at(day: str, hour: int) -> str:
    """The source's clock for the statements after it (`SET timestamp`, per session)."""
    when = datetime.fromisoformat(day).replace(hour=hour, tzinfo=UTC)
    return f"SET timestamp = {int(when.timestamp())}"


def _source_rows(cdc, db: str) -> list[tuple[str, ...]]:
    conn = cdc.mariadb.connect(db)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT 'user_info_1', id, v FROM user_info_1 UNION ALL SELECT 'user_info_2', id, v FROM user_info_2"
            )
            return sorted(tuple(str(v) for v in r) for r in cur.fetchall())
    finally:
        conn.close()


def _rules(db: str):
    from sharp_dagster.cdc.source.shards import ShardRules

    return ShardRules.from_mapping({"user_info": r"user_info_(\d+)"})


def test_running_collector_streams_new_changes_and_stops_cleanly_on_sigterm(cdc):
    db = cdc.new_database()
    cdc.mariadb.create_user(USER, PASSWORD)
    cdc.sql(
        db, "CREATE TABLE user_info_1 (id INT PRIMARY KEY, v INT)", "INSERT INTO user_info_1 VALUES (1, 1)"
    )
    config = _write_config(cdc, db, cdc.tmp_path / "source.yaml")
    db_url = _db_url(cdc)

    def saved_gtid() -> str | None:
        loaded = _saved(db_url)
        return loaded.gtid_pos if loaded else None

    proc = subprocess.Popen(
        _collect_cmd(cdc, config, "--flush-interval", "0.1", "--heartbeat-interval", "0.5"),
        env=_env(db_url),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first = cdc.gtid_pos()
        _wait_for(lambda: saved_gtid() == first, 60, "the first insert", proc)
        # While it runs: new changes arrive without a restart.
        cdc.sql(db, "INSERT INTO user_info_1 VALUES (2, 2)", "UPDATE user_info_1 SET v = 3 WHERE id = 1")
        second = cdc.gtid_pos()
        _wait_for(lambda: saved_gtid() == second, 30, "the live changes", proc)
        os.kill(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 0, err[-2000:]
    assert "stopped by stop" in out
    assert PASSWORD not in out + err
    records = cdc.read_topic(f"binlog.{db}")
    kinds = [
        (r["value"]["type"], r["value"]["data"][0]["id"])
        for r in records
        if r["value"]["type"] in ("INSERT", "UPDATE")
    ]
    assert sorted(kinds) == [("INSERT", "1"), ("INSERT", "2"), ("UPDATE", "1")]
    # Idle, it still sends heartbeats (caught up): the landing's watermark moves without changes.
    assert {r["partition"] for r in records if r["value"]["type"] == "HEARTBEAT"} == {0, 1}


def test_position_store_reads_an_old_file_once_and_fences_a_second_collector(tmp_path):
    url = f"sqlite:///{tmp_path / 'log.db'}"
    legacy = tmp_path / "shop.state.json"
    old = CollectorState(SOURCE, "binlog.000003", 1234, "0-1-42", 1_700_000_000_000)
    FileStateStore(legacy).save(old)
    first = DbStateStore(url, SOURCE, legacy_file=legacy, owner="host-a:1")
    assert first.load() == old  # nothing in the database yet: the old local file, once
    newer = CollectorState(SOURCE, "binlog.000003", 5678, "0-1-50", 1_700_000_100_000)
    first.save(newer)
    legacy.unlink()
    assert saved_position(url, SOURCE) == newer
    # A second collector for the same source takes the position over; the first can no longer move it.
    second = DbStateStore(url, SOURCE, owner="host-b:2")
    resumed = second.load()
    assert (resumed.binlog_pos, resumed.gtid_pos, resumed.event_ts_ms) == (5678, "0-1-50", newer.event_ts_ms)
    with pytest.raises(CollectorError, match="taken by another collector"):
        first.save(CollectorState(SOURCE, "binlog.000003", 9999, "0-1-60"))
    assert saved_position(url, SOURCE) == newer
    second.save(CollectorState(SOURCE, "binlog.000004", 4, "0-1-61"))
    assert saved_position(url, SOURCE).gtid_pos == "0-1-61"


def test_migration_0004_creates_the_position_table_as_modelled(tmp_path):
    import sqlalchemy as sa

    from sharp_dagster.cdc.capture.collector_db import cdc_collector_position as model
    from sharp_dagster.joblog.migrate import ensure_schema

    engine = ensure_schema(f"sqlite:///{tmp_path / 'log.db'}")
    inspector = sa.inspect(engine)
    made = {c["name"]: c for c in inspector.get_columns(model.name)}
    assert set(made) == {c.name for c in model.columns}
    for column in model.columns:  # the model (collector_db.py) = the migration (0004)
        assert made[column.name]["nullable"] == column.nullable, column.name
        assert str(made[column.name]["type"]) == column.type.compile(dialect=engine.dialect), column.name
    assert inspector.get_pk_constraint(model.name)["constrained_columns"] == ["source_id"]
