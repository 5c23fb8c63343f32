"""Snapshot bootstrap: a Spark JDBC read of every shard, stamped with the binlog position read before it."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pytest

from sharp_dagster.cdc.config import TableConfig
from sharp_dagster.cdc.messages import parse_message
from sharp_dagster.cdc.snapshot import SnapshotError, read_binlog_position, snapshot_table

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
