"""The sample business: an online shop's source database `shop` (tables, keys, shards, types).

`user_info` is physically sharded into `user_info_0` .. `user_info_{N-1}` by `user_id % N`. Types are given both as
MySQL DDL (for the real source database of the CDC tests) and as Spark SQL types (for the warehouse).
"""

from __future__ import annotations

from dataclasses import dataclass

SOURCE_DB = "shop"
USER_SHARDS = 4


@dataclass(frozen=True)
class Column:
    name: str
    mysql_type: str
    spark_type: str


@dataclass(frozen=True)
class SourceTable:
    """A logical source table; `shards` lists its physical tables (just itself when unsharded)."""

    name: str
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...]
    shards: tuple[str, ...]
    shard_regex: str | None = None

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    @property
    def spark_schema(self) -> dict[str, str]:
        return {c.name: c.spark_type for c in self.columns}

    def mysql_ddl(self, physical: str) -> str:
        cols = ",\n  ".join(f"`{c.name}` {c.mysql_type}" for c in self.columns)
        pk = ", ".join(f"`{k}`" for k in self.primary_key)
        return f"CREATE TABLE `{physical}` (\n  {cols},\n  PRIMARY KEY ({pk})\n)"


def _cols(*spec: tuple[str, str, str]) -> tuple[Column, ...]:
    return tuple(Column(*s) for s in spec)


TABLES: dict[str, SourceTable] = {
    "user_info": SourceTable(
        name="user_info",
        columns=_cols(
            ("user_id", "BIGINT NOT NULL", "bigint"),
            ("user_name", "VARCHAR(64) NOT NULL", "string"),
            ("city", "VARCHAR(32)", "string"),
            ("level", "VARCHAR(16)", "string"),
            ("register_time", "DATETIME", "timestamp"),
            ("updated_at", "DATETIME", "timestamp"),
        ),
        primary_key=("user_id",),
        shards=tuple(f"user_info_{i}" for i in range(USER_SHARDS)),
        shard_regex=r"user_info_(\d+)",
    ),
    "product": SourceTable(
        name="product",
        columns=_cols(
            ("product_id", "BIGINT NOT NULL", "bigint"),
            ("product_name", "VARCHAR(128) NOT NULL", "string"),
            ("category", "VARCHAR(32)", "string"),
            ("price", "DECIMAL(10,2)", "decimal(10,2)"),
            ("updated_at", "DATETIME", "timestamp"),
        ),
        primary_key=("product_id",),
        shards=("product",),
    ),
    "orders": SourceTable(
        name="orders",
        columns=_cols(
            ("order_id", "BIGINT NOT NULL", "bigint"),
            ("user_id", "BIGINT NOT NULL", "bigint"),
            ("order_status", "VARCHAR(16) NOT NULL", "string"),
            ("order_time", "DATETIME NOT NULL", "timestamp"),
            ("total_amount", "DECIMAL(12,2)", "decimal(12,2)"),
            ("updated_at", "DATETIME", "timestamp"),
        ),
        primary_key=("order_id",),
        shards=("orders",),
    ),
    "order_item": SourceTable(
        name="order_item",
        columns=_cols(
            ("item_id", "BIGINT NOT NULL", "bigint"),
            ("order_id", "BIGINT NOT NULL", "bigint"),
            ("product_id", "BIGINT NOT NULL", "bigint"),
            ("quantity", "INT NOT NULL", "int"),
            ("unit_price", "DECIMAL(10,2)", "decimal(10,2)"),
        ),
        primary_key=("item_id",),
        shards=("order_item",),
    ),
}


def shard_of_user(user_id: int) -> str:
    return f"user_info_{user_id % USER_SHARDS}"


def logical_table(physical: str) -> str:
    for table in TABLES.values():
        if physical in table.shards:
            return table.name
    raise KeyError(f"unknown physical table {physical!r} of source database {SOURCE_DB!r}")
