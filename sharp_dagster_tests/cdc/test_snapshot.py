"""Snapshot bootstrap: a Spark JDBC read of every shard, stamped with the binlog position read before it."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pytest

from sharp_dagster.cdc.change.messages import parse_message
from sharp_dagster.cdc.ods.snapshot import SnapshotError, read_binlog_position, snapshot_table
from sharp_dagster.cdc.source.config import TableConfig

TABLE = TableConfig("user_info", ("id",), r"user_info_(\d+)")


def test_snapshot_reads_all_shards_stamped_before_later_changes(cdc, spark):
    db = cdc.new_database()
    ddl = "(id INT PRIMARY KEY, name VARCHAR(20), score DECIMAL(10,2), seen TIMESTAMP NULL)"
    cdc.sql(
        db,
        f"CREATE TABLE user_info_1 {ddl}",
        f"CREATE TABLE user_info_2 {ddl}",
        f"CREATE TABLE user_info_1_bak {ddl}",
        "SET time_zone = '+00:00'",
        "INSERT INTO user_info_1 VALUES (1, 'a', 1.50, '2024-01-02 03:04:05'), (2, 'b', NULL, NULL)",
        "INSERT INTO user_info_2 VALUES (1, 'c', 2.00, '2024-06-30 23:00:00')",
        "INSERT INTO user_info_1_bak VALUES (9, 'x', 0, NULL)",
    )
    position = read_binlog_position(cdc.mysql)
    assert position.gtid_pos == cdc.gtid_pos() and position.binlog_file.startswith("binlog.")
    cdc.sql(db, "UPDATE user_info_2 SET name = 'changed after' WHERE id = 1")

    # A server in another time zone must not shift TIMESTAMP values (the JDBC session is put in UTC).
    cdc.mariadb.execute("SET GLOBAL time_zone = '+05:00'")
    try:
        result = snapshot_table(spark, cdc.mysql, db, TABLE, position=position, num_partitions=2)
        rows = sorted(result.df.collect(), key=lambda r: (r.source_table, r.id))
    finally:
        cdc.mariadb.execute("SET GLOBAL time_zone = SYSTEM")
    assert result.shards == ["user_info_1", "user_info_2"]
    assert [(r.source_table, r.id, r.name, r.score) for r in rows] == [
        ("user_info_1", 1, "a", Decimal("1.50")),
        ("user_info_1", 2, "b", None),
        (
            "user_info_2",
            1,
            "changed after",
            Decimal("2.00"),
        ),  # read after the position: the merge re-applies it
    ]
    assert {r._binlog_seq for r in rows} == {Decimal(position.binlog_seq)} and {
        r._is_deleted for r in rows
    } == {False}
    assert dict(result.df.dtypes)["_binlog_seq"] == "decimal(38,0)"
    # TIMESTAMP columns read as the same instants the binlog carries (UTC).
    seen = {(r.source_table, r.id): r.seen for r in rows}
    utc = {k: v.replace(tzinfo=None) if v else None for k, v in seen.items()}
    assert utc[("user_info_1", 1)] == dt.datetime(2024, 1, 2, 3, 4, 5)
    assert utc[("user_info_2", 1)] == dt.datetime(2024, 6, 30, 23, 0, 0)

    # Changes before the position sort below the stamp, changes after it above.
    cdc.collector(cdc.config(db)).run(once=True)
    rules = cdc.config(db).databases[0].shard_rules
    seqs = {
        (m["type"], m["table"], (m["data"] or [{}])[0].get("name")): parse_message(
            json.dumps(m).encode(), "t", 0, 0, rules
        )["binlog_seq"]
        for m in cdc.changes(f"binlog.{db}")
    }
    stamp = Decimal(position.binlog_seq)
    assert seqs[("INSERT", "user_info_2", "c")] < stamp < seqs[("UPDATE", "user_info_2", "changed after")]


def test_snapshot_of_a_table_that_does_not_exist(cdc, spark):
    db = cdc.new_database()
    with pytest.raises(SnapshotError, match="no table matches user_info"):
        snapshot_table(spark, cdc.mysql, db, TABLE)


# Wall-clock values, among them year 1000 (Asia/Shanghai's local mean time is +8:05:43 there) and 1988-04-10
# 02:30, which does not exist in Asia/Shanghai (daylight saving began at 02:00 that day).
TEMPORAL_ROWS = [
    (1, "1000-01-01 00:00:00", "1000-01-01 00:00:00.000000", "1000-01-01", "1970-01-01 00:00:01"),
    (2, "2024-01-01 00:00:00", "2023-12-31 23:59:59.999999", "2024-01-01", "2024-01-01 00:00:00"),
    (3, "1988-04-10 02:30:00", "1988-04-10 02:30:00.500000", "1988-04-10", "1988-04-10 02:30:00"),
    (4, "9999-12-31 23:59:59", "9999-12-31 23:59:59.999999", "9999-12-31", "2038-01-19 03:14:07"),
]
PROBE = """
import json, sys
from sharp_dagster.cdc.source.config import MysqlSettings, TableConfig
from sharp_dagster.cdc.ods.snapshot import snapshot_table
from sharp_dagster.settings import Settings
from sharp_dagster.spark.session import build_spark_session

host, port, db = sys.argv[1], int(sys.argv[2]), sys.argv[3]
spark = build_spark_session(Settings.from_env(), app_name="tz_probe", **{"spark.sql.session.timeZone": "Asia/Shanghai"})
jvm_zone = spark.sparkContext._jvm.java.util.TimeZone.getDefault().getID()
for parts in (1, 2):
    df = snapshot_table(spark, MysqlSettings(host, port, "root", ""), db, TableConfig("temporal", ("id",)),
                        num_partitions=parts).df
    rows = df.selectExpr("id", "unix_micros(dt0)", "unix_micros(dt6)", "unix_date(d)", "unix_micros(ts)").collect()
    print(json.dumps({"jvm": jvm_zone, "parts": parts, "rows": sorted([list(r) for r in rows])}))
"""


def _micros(text: str) -> int:
    stamp = dt.datetime.fromisoformat(text).replace(tzinfo=dt.UTC)
    return (stamp - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)


def test_snapshot_values_do_not_depend_on_the_machines_time_zone(mariadb, tmp_path):
    """A JVM and a Spark session in Asia/Shanghai read DATETIME, TIMESTAMP and DATE values as the source holds
    them (DATETIMEs as wall-clock UTC, TIMESTAMPs as their instants), read whole or in key ranges."""
    import os
    import subprocess
    import sys

    mariadb.execute("DROP DATABASE IF EXISTS tz_probe", "CREATE DATABASE tz_probe")
    values = ", ".join(f"({i}, '{a}', '{b}', '{c}', '{d}')" for i, a, b, c, d in TEMPORAL_ROWS)
    mariadb.execute(
        "CREATE TABLE temporal (id INT PRIMARY KEY, dt0 DATETIME, dt6 DATETIME(6), d DATE, ts TIMESTAMP NULL)",
        "SET time_zone = '+00:00'",
        f"INSERT INTO temporal VALUES {values}",
        database="tz_probe",
    )
    env = {**os.environ, "TZ": "Asia/Shanghai", "SHARP_DATA_DIR": str(tmp_path / "data")}
    script = tmp_path / "tz_probe.py"
    script.write_text(PROBE)
    done = subprocess.run(
        [sys.executable, str(script), mariadb.host, str(mariadb.port), "tz_probe"],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    epoch = dt.date(1970, 1, 1)
    expected = [
        [i, _micros(a), _micros(b), (dt.date.fromisoformat(c) - epoch).days, _micros(d)]
        for i, a, b, c, d in TEMPORAL_ROWS
    ]
    outputs = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [(o["jvm"], o["parts"]) for o in outputs] == [("Asia/Shanghai", 1), ("Asia/Shanghai", 2)]
    for output in outputs:
        assert output["rows"] == expected
