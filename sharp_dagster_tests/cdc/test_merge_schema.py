"""Columns added by DDL in the binlog (`sharp_dagster.cdc.change.schema_evolution`): parsing and the evolved column list."""

from __future__ import annotations

import pytest

from sharp_dagster.cdc.change.ddl_changes import evolve_schema
from sharp_dagster.cdc.change.schema_evolution import AddedColumn, parse_added_columns


@pytest.mark.parametrize(
    ("ddl", "expected"),
    [
        ("ALTER TABLE t ADD COLUMN email varchar(64)", [AddedColumn("email", "string")]),
        (
            "alter table `userinfo3` add `score` decimal(10,2) after id",
            [AddedColumn("score", "decimal(10,2)")],
        ),
        ("ALTER TABLE t ADD n INT NOT NULL DEFAULT -3", [AddedColumn("n", "int", "-3")]),
        ("ALTER TABLE t ADD n BIGINT UNSIGNED NOT NULL", [AddedColumn("n", "decimal(20,0)", "0")]),
        ("ALTER TABLE t ADD s varchar(3) NOT NULL", [AddedColumn("s", "string", "''")]),
        ("ALTER TABLE t ADD s varchar(3) DEFAULT 'it''s'", [AddedColumn("s", "string", "'it\\'s'")]),
        ("ALTER TABLE t ADD flag tinyint(1) DEFAULT 1", [AddedColumn("flag", "boolean", "1")]),
        ("ALTER TABLE t ADD at datetime DEFAULT CURRENT_TIMESTAMP", [AddedColumn("at", "timestamp")]),
        ("ALTER TABLE t ADD (a int, b json)", [AddedColumn("a", "int"), AddedColumn("b", "string")]),
        (
            "ALTER TABLE t ADD COLUMN a date, ADD COLUMN b double, DROP COLUMN c",
            [AddedColumn("a", "date"), AddedColumn("b", "double")],
        ),
        ("ALTER TABLE t DROP COLUMN c", []),
        ("ALTER TABLE t ADD INDEX idx_c (c)", []),
        ("CREATE TABLE t (id int)", []),
        ("TRUNCATE TABLE t", []),
    ],
)
def test_parse_added_columns(ddl, expected):
    assert parse_added_columns(ddl) == expected


def test_evolve_schema_adds_each_column_once_in_binlog_order():
    evolution = evolve_schema(
        [("id", "bigint"), ("name", "string")],
        [
            "ALTER TABLE user_0 ADD COLUMN level int NOT NULL DEFAULT 1",
            "ALTER TABLE user_1 ADD COLUMN level int NOT NULL DEFAULT 1",  # the same DDL on another shard
            "ALTER TABLE user_0 ADD COLUMN NAME varchar(9)",  # MySQL names are case-insensitive
            "ALTER TABLE user_0 ADD COLUMN email text",
        ],
    )
    assert evolution.columns == [("id", "bigint"), ("name", "string"), ("level", "int"), ("email", "string")]
    assert evolution.defaults == {"level": "1"}


def test_unparseable_ddl_is_an_error_naming_the_statement():
    with pytest.raises(ValueError, match="cannot parse DDL"):
        parse_added_columns("ALTER TABLE t ADD COLUMN x int (((")
