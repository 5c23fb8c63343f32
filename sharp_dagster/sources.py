"""External source tables: what the ODS layer reads that no asset of ours writes.

The shop's generated files (`sharp_dagster.demo.generator`) are exposed to Spark SQL as
`src_shop.<table>_snapshot` (the initial snapshot) and `src_shop.<table>_changes` (row changes, partitioned by
`dt`). Each is an external (source) asset in Dagster and a vertex of the lineage graph, fed by the physical tables
of the source database (`mysql:shop.<physical table>`).
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


def snapshot_table(logical: str) -> str:
    return f"{SOURCE_SCHEMA}.{logical}_snapshot"


def changes_table(logical: str) -> str:
    return f"{SOURCE_SCHEMA}.{logical}_changes"


def external_schemas() -> dict[str, dict[str, str]]:
    """Column types of every external table, for `SELECT *` expansion and validation."""
    schemas: dict[str, dict[str, str]] = {}
    for table in TABLES.values():
        schemas[snapshot_table(table.name)] = {**table.spark_schema, "_source_table": "string"}
        schemas[changes_table(table.name)] = {**table.spark_schema, **CHANGE_META, "dt": "string"}
        for physical in table.shards:
            schemas[f"mysql:{SOURCE_DB}.{physical}"] = dict(table.spark_schema)
    return schemas


def source_edges() -> list[tuple[str, str]]:
    """Table-level edges from the source database's physical tables to the files that carry them."""
    edges = []
    for table in TABLES.values():
        for physical in table.shards:
            edges.append((f"mysql:{SOURCE_DB}.{physical}", snapshot_table(table.name)))
            edges.append((f"mysql:{SOURCE_DB}.{physical}", changes_table(table.name)))
    return edges


def register_sources(spark, sample_dir: Path | str) -> None:
    """Create the `src_shop` tables over the generated JSON files (idempotent, cheap: no data is read)."""
    root = Path(sample_dir) / "shop"
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {SOURCE_SCHEMA}")
    existing = {r.tableName for r in spark.sql(f"SHOW TABLES IN {SOURCE_SCHEMA}").collect()}
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
