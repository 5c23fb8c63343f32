"""The demo's generated files as Spark SQL tables (`src_shop`), for the bootstrap of the ODS states.

The shop's generated files (`sharp_dagster.demo.generator`) are exposed as `src_shop.<table>_snapshot` (the initial
snapshot, the demo's bootstrap of the ODS state) and `src_shop.<table>_changes` (the row changes, partitioned by
`dt`, which the demo replays through Kafka), typed by the shop's CDC declaration (`sharp_dagster.demo.shop`).
"""

from __future__ import annotations

from pathlib import Path

from sharp_dagster.demo.shop import TABLES

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


def register_sources(spark, sample_dir: Path | str) -> None:
    """Create the `src_shop` tables over the generated JSON files (idempotent, cheap: no data is read)."""
    root = Path(sample_dir) / "shop"
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {SOURCE_CATALOG}.{SOURCE_SCHEMA}")
    opts = "OPTIONS (timestampFormat 'yyyy-MM-dd HH:mm:ss', mode 'FAILFAST')"
    for table in TABLES.values():
        # Re-created on every call: a session may have registered them over another sample folder before.
        spark.sql(f"DROP TABLE IF EXISTS {snapshot_table(table.name)}")
        spark.sql(f"DROP TABLE IF EXISTS {changes_table(table.name)}")
        snap_cols = ", ".join(
            f"`{c}` {t}" for c, t in {**table.spark_schema, "_source_table": "string"}.items()
        )
        spark.sql(
            f"CREATE TABLE {snapshot_table(table.name)} ({snap_cols}) USING json {opts} "
            f"LOCATION '{root / 'snapshot' / table.name}'"
        )
        change_cols = ", ".join(
            f"`{c}` {t}" for c, t in {**table.spark_schema, **CHANGE_META, "dt": "string"}.items()
        )
        spark.sql(
            f"CREATE TABLE {changes_table(table.name)} ({change_cols}) USING json {opts} "
            f"PARTITIONED BY (dt) LOCATION '{root / 'changes' / table.name}'"
        )
