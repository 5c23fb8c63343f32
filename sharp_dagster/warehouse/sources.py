"""Tables the SQL assets read that no SQL file writes: the CDC path's source, raw binlog and ODS tables.

The ODS tables are built by the CDC path (`sharp_dagster.cdc`): source database tables (`mysql:<db>.<physical>`)
-> raw binlog table `original_binlog.<db>` -> `ods.<table>`. What they are comes from the CDC declarations
(`warehouse/cdc/*.yaml`, `sharp_dagster.warehouse.cdc_layout`): each table's columns (Spark types derived from the MySQL
ones), primary key and physical tables. Their schemas and edges feed the catalog and the lineage graph, so the
warehouse needs every declared table's columns, and a sharded table's physical tables (`shards`).
"""

from __future__ import annotations

from sharp_dagster.cdc.change.binlog_schema import RAW_BINLOG_COLUMNS, RAW_BINLOG_PARTITION_COLUMNS
from sharp_dagster.cdc.merge.result import SEQ_COLUMN, SEQ_TYPE
from sharp_dagster.cdc.ods.versions import ODS_DATABASE
from sharp_dagster.cdc.source.config import ConfigError
from sharp_dagster.warehouse.cdc_layout import (
    OdsTable,
    landing_assets,
    landing_table,
    lineage_edges,
    ods_tables,
    source_start,
)


def declared_tables() -> list[OdsTable]:
    """Every CDC table, checked to declare what the warehouse needs (`ConfigError` naming the file and table)."""
    tables = ods_tables()
    for t in tables:
        origin = t.source.path or "CDC config"
        if not t.table.columns:
            raise ConfigError(
                f"{origin}: table {t.database}.{t.name} declares no columns; the warehouse needs them for the "
                f"schema and lineage of ods.{t.name} (columns: ['<name> <MySQL type>', ...])"
            )
        if not t.table.shards:
            raise ConfigError(
                f"{origin}: table {t.database}.{t.name} is sharded but declares no shards (a count or the "
                "physical table names); the warehouse shows each physical table as a source"
            )
    return tables


def physical_tables(database: str | None = None) -> dict[str, list[str]]:
    """Logical table -> its physical tables in the source database, of one database or of all."""
    return {t.name: list(t.table.shards) for t in declared_tables() if database in (None, t.database)}


def ods_schema(t: OdsTable) -> dict[str, str]:
    """The columns of `ods.<table>` as the daily merge publishes them (sharded tables carry their shard), and the
    binlog position of the change that last set each row (`cdc.ods.versions`); no `dt`: a day is a tag."""
    cols = dict(t.table.spark_schema)
    if t.shard_column:
        cols[t.shard_column] = "string"
    cols[SEQ_COLUMN] = SEQ_TYPE
    return cols


def day_tagged_tables() -> frozenset[str]:
    """The tables whose days are Iceberg tags, not `dt` partitions: every CDC-built `ods.<table>`
    (`cdc.ods.versions`). A SQL table reads one of its days as `FROM ods.<table> VERSION AS OF '${dt}'`."""
    return frozenset(f"{ODS_DATABASE}.{t.name}" for t in ods_tables())


def external_schemas() -> dict[str, dict[str, str]]:
    """Column types of the tables SQL assets read that no SQL file writes: the CDC-built ODS tables, the raw
    binlog tables and the source databases' tables (for lineage and `SELECT *` expansion)."""

    schemas: dict[str, dict[str, str]] = {}
    for t in declared_tables():
        schemas[f"ods.{t.name}"] = ods_schema(t)
        for physical in t.table.shards:
            schemas[f"mysql:{t.database}.{physical}"] = dict(t.table.spark_schema)
    for _, database, _ in landing_assets():
        schemas[landing_table(database)] = {
            **dict(RAW_BINLOG_COLUMNS),
            **{c: "string" for c in RAW_BINLOG_PARTITION_COLUMNS},
        }
    return schemas


def source_edges() -> list[tuple[str, str]]:
    """Table-level edges of the CDC path: source tables -> raw binlog table -> ODS tables."""

    return lineage_edges(physical_tables())


def other_starts() -> dict[str, str]:
    """Tables written by non-SQL assets (the CDC path), qualified name -> first partition (the source's start)."""

    starts = {f"ods.{t.name}": t.start for t in ods_tables()}
    starts.update({landing_table(db): source_start(src) for src, db, _ in landing_assets()})
    return starts


def other_assets() -> dict[str, str]:
    """Tables written by non-SQL assets (the CDC path), qualified name -> grain."""
    assets = {f"ods.{t.name}": "daily" for t in ods_tables()}
    assets.update({landing_table(db): "hourly" for _, db, _ in landing_assets()})
    return assets
