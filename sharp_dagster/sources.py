"""Tables the SQL assets read that no SQL file writes, and the demo's generated source files.

The ODS tables are built by the CDC path (`sharp_dagster.cdc`): source database tables (`mysql:shop.<physical>`)
-> raw binlog table `original_binlog.shop` -> `ods.<table>`. Their schemas and edges feed the lineage graph.

The shop's generated files (`sharp_dagster.demo.generator`) are exposed to Spark SQL as
`src_shop.<table>_snapshot` (the initial snapshot, the demo's bootstrap of the ODS state) and
`src_shop.<table>_changes` (row changes, partitioned by `dt`, which the demo replays through Kafka).
"""

from __future__ import annotations

from pathlib import Path

from sharp_dagster.demo.shop import SOURCE_DB, TABLES

SOURCE_SCHEMA = "src_shop"
CHANGE_META = {
    "_seq": "bigint",
    "_txn": "bigint",
    "_ts": "string",
    "_op": "string",
    "_source_table": "string",
}


# The sample files are session-local JSON tables in Spark's built-in catalog; the warehouse's own catalog (the
# session's default) holds only Iceberg tables.
SOURCE_CATALOG = "spark_catalog"


def snapshot_table(logical: str) -> str:
    return f"{SOURCE_CATALOG}.{SOURCE_SCHEMA}.{logical}_snapshot"


def changes_table(logical: str) -> str:
    return f"{SOURCE_CATALOG}.{SOURCE_SCHEMA}.{logical}_changes"


def ods_schema(table) -> dict[str, str]:
    """The columns of `ods.<table>` as the daily merge publishes them (sharded tables carry their shard)."""
    cols = dict(table.spark_schema)
    if len(table.shards) > 1:
        cols["source_table"] = "string"
    return cols


def external_schemas() -> dict[str, dict[str, str]]:
    """Column types of the tables SQL assets read that no SQL file writes: the CDC-built ODS tables, the raw
    binlog table and the source database's tables (for lineage and `SELECT *` expansion)."""
    from sharp_dagster.cdc.binlog_schema import RAW_BINLOG_COLUMNS, RAW_BINLOG_PARTITION_COLUMNS

    schemas: dict[str, dict[str, str]] = {}
    for table in TABLES.values():
        schemas[f"ods.{table.name}"] = ods_schema(table)
        for physical in table.shards:
            schemas[f"mysql:{SOURCE_DB}.{physical}"] = dict(table.spark_schema)
    schemas[f"original_binlog.{SOURCE_DB}"] = {
        **dict(RAW_BINLOG_COLUMNS),
        **{c: "string" for c in RAW_BINLOG_PARTITION_COLUMNS},
    }
    return schemas


def source_edges() -> list[tuple[str, str]]:
    """Table-level edges of the CDC path: source tables -> raw binlog table -> ODS tables."""
    from sharp_dagster.warehouse.cdc_layout import lineage_edges

    return lineage_edges({t.name: list(t.shards) for t in TABLES.values()})


def other_assets() -> dict[str, str]:
    """Tables written by non-SQL assets (the CDC path), qualified name -> grain."""
    from sharp_dagster.warehouse.cdc_layout import landing_assets, ods_tables

    assets = {f"ods.{t.name}": "daily" for t in ods_tables()}
    assets.update({f"original_binlog.{db}": "hourly" for _, db, _ in landing_assets()})
    return assets


def register_sources(spark, sample_dir: Path | str) -> None:
    """Create the `src_shop` tables over the generated JSON files (idempotent, cheap: no data is read)."""
    root = Path(sample_dir) / "shop"
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {SOURCE_CATALOG}.{SOURCE_SCHEMA}")
    # Re-created on every call: a session may have registered them over another sample folder before.
    for table in TABLES.values():
        spark.sql(f"DROP TABLE IF EXISTS {snapshot_table(table.name)}")
        spark.sql(f"DROP TABLE IF EXISTS {changes_table(table.name)}")
    existing: set[str] = set()
    opts = "OPTIONS (timestampFormat 'yyyy-MM-dd HH:mm:ss', mode 'FAILFAST')"
    for table in TABLES.values():
        snap_cols = ", ".join(
            f"`{c}` {t}" for c, t in {**table.spark_schema, "_source_table": "string"}.items()
        )
        if f"{table.name}_snapshot" not in existing:
            spark.sql(
                f"CREATE TABLE {snapshot_table(table.name)} ({snap_cols}) USING json {opts} "
                f"LOCATION '{root / 'snapshot' / table.name}'"
            )
        change_cols = ", ".join(
            f"`{c}` {t}" for c, t in {**table.spark_schema, **CHANGE_META, "dt": "string"}.items()
        )
        if f"{table.name}_changes" not in existing:
            spark.sql(
                f"CREATE TABLE {changes_table(table.name)} ({change_cols}) USING json {opts} "
                f"PARTITIONED BY (dt) LOCATION '{root / 'changes' / table.name}'"
            )
        else:
            spark.catalog.refreshTable(changes_table(table.name))


def missing_source_days(sample_dir: Path | str, day: str) -> list[str]:
    """The change files of `day` that are not there (an ODS partition must not be built without them)."""
    root = Path(sample_dir) / "shop" / "changes"
    return [
        str(root / t / f"dt={day}") for t in TABLES if not (root / t / f"dt={day}" / "changes.jsonl").exists()
    ]
