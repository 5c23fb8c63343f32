"""The source schema of `test_source_oracle.py`'s workload (`oracle_workload.py`), its CDC YAML, and SQL text.

Three logical tables: `user_info` sharded into `user_info_0..3`, `product` (gains `stock` mid-day: `ALTER_SQL`),
and `orders`.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

UTC = dt.UTC
# The source's own first day (its bootstrap's), not the warehouse's 2024-01-01; the snapshot is a leap day's state.
SNAPSHOT_DAY = "2024-02-29"
DAYS = ["2024-03-01", "2024-03-02", "2024-03-03"]
SHARDS = [f"user_info_{i}" for i in range(4)]
SHARD_COLUMN = "source_table"
# The DDL of the middle day: the new column is not in the YAML (written before it), as for a real user.
ALTER_AT = dt.datetime(2024, 3, 2, 12, 0, tzinfo=UTC)
ALTER_SQL = "ALTER TABLE product ADD COLUMN stock INT NOT NULL DEFAULT 10"
# Odd DATETIMEs kept unchanged since the snapshot: the Julian/Gregorian and LMT eras, a Shanghai DST gap
# (1988-04-17 02:00-03:00 did not exist there), the epoch, the end of the range.
ODD_DATETIMES = [
    "1000-01-01 00:00:00",
    "1000-06-15 12:34:56",
    "1900-01-01 00:00:00",
    "1970-01-01 00:00:00",
    "1988-04-17 02:30:00",
    "2024-01-01 00:00:00",
    "2038-01-19 03:14:08",
    "9999-12-31 23:59:59",
]
ODD_DATES = ["1000-01-01", "1900-02-28", "1970-01-01", "1988-04-17", "9999-12-31"]

COLUMNS: dict[str, list[str]] = {
    "user_info": [
        "user_id BIGINT NOT NULL",
        "user_name VARCHAR(64) NOT NULL",
        "city VARCHAR(32)",
        "level VARCHAR(16)",
        "register_time DATETIME",
        "updated_at DATETIME",
    ],
    "product": [
        "product_id BIGINT NOT NULL",
        "product_name VARCHAR(128) NOT NULL",
        "category VARCHAR(32)",
        "price DECIMAL(10,2)",
        "updated_at DATETIME",
    ],
    "orders": [
        "order_id BIGINT NOT NULL",
        "user_id BIGINT NOT NULL",
        "order_status VARCHAR(16) NOT NULL",
        "order_time DATETIME NOT NULL",
        "due DATE",
        "total_amount DECIMAL(12,2)",
        "updated_at DATETIME",
    ],
}
PRIMARY_KEY = {
    "user_info": ["user_id"],
    "product": ["product_id"],
    "orders": ["order_id"],
}
PHYSICAL = {"user_info": SHARDS, "product": ["product"], "orders": ["orders"]}
LOGICAL = {p: t for t, ps in PHYSICAL.items() for p in ps}


def source_yaml(database: str, topic: str, lateness_minutes: int = 15) -> dict[str, Any]:
    """The CDC source YAML of the workload's database, as a user writes it before the workload starts."""
    tables = []
    for name, columns in COLUMNS.items():
        entry: dict[str, Any] = {"name": name, "primary_key": PRIMARY_KEY[name], "columns": columns}
        if name == "user_info":
            entry.update(shard_regex=r"user_info_(\d+)", shards=len(SHARDS))
        if (
            name == "orders"
        ):  # the busiest table: merged as its hours land (README 'A day merged as its hours land')
            entry.update(premerge=True)
        tables.append(entry)
    return {
        "source_id": "oracle-mariadb",
        "flavor": "mariadb",
        "replica_server_id": 4901,
        "lateness_minutes": lateness_minutes,
        "topic_partitions": 2,
        "databases": [{"name": database, "topic": topic, "tables": tables}],
    }


def at(day: str, hour: int, minute: int = 0, second: int = 0) -> dt.datetime:
    return dt.datetime.fromisoformat(day).replace(hour=hour, minute=minute, second=second, tzinfo=UTC)


def midnight_after(day: str) -> dt.datetime:
    return at(day, 0) + dt.timedelta(days=1)


class Sql(str):
    """A literal SQL expression (NOW()), written as is."""


NOW = Sql("NOW()")


def lit(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, Sql):
        return str(value)
    if isinstance(value, (int, Decimal)):
        return str(value)
    return "'" + str(value).replace("\\", "\\\\").replace("'", "''") + "'"


def key_where(table: str, keys: list[tuple]) -> str:
    (column,) = PRIMARY_KEY[table]
    return f"`{column}` IN ({', '.join(lit(k[0]) for k in keys)})"
