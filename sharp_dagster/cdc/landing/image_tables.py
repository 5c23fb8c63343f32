"""The typed images tables: each logical source table's changes with typed row images, written by the landing.

`binlog_images.<database>__<table>` (partitioned by dt, hour) holds every change of one logical table as
`images.typed_images` gives it: the binlog position columns, the op, the physical table, the DDL, and the row
images as typed structs. The daily merge reads it and parses no JSON; the raw binlog table keeps the JSON.

The images' types, per table, in this order of precedence:
1. the images table's own `after` fields, once it exists (a later hour never changes a column's type);
2. the table's configured schema (`known`: the ODS state's columns, passed by the caller);
3. the columns CREATE TABLE / ALTER TABLE ... ADD of the landed hours declare, with their types;
4. for a table with none of these yet, the columns its images carry, typed by their JSON values (one Spark job
   for every such table of the landing; decimals as decimal(38, 18) at least, since later hours' values may be
   wider than the first ones'). A table with a schema needs no such job: a column neither its schema nor its DDL
   has is not a column of the ODS table (the merge keeps the state's columns and those the DDL adds).
Canal's `mysqlType` is not used: it carries no decimal precision or scale (`decimal` alone), so it would type
amounts less exactly than the table's schema.

A value not of its column's type never fails the landing (it would stall the topic at that offset): it is kept
as null with the column named in `cast_errors`, and the daily merge refuses that event, naming it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sharp_dagster.cdc.change import images
from sharp_dagster.spark.iceberg import IcebergTables
from sharp_dagster.spark.tables import TableRef

IMAGES_DATABASE = "binlog_images"
PARTITION_COLUMNS = ("dt", "hour")
WIDE_DECIMAL_SCALE = 18  # JSON-typed decimals: decimal(38, 18), 20 digits before the point


def images_table_ref(database: str, table: str) -> TableRef:
    return TableRef(IMAGES_DATABASE, f"{database}__{table}", PARTITION_COLUMNS)


def write_typed_images(
    store: IcebergTables,
    database: str,
    rows: DataFrame,
    tables: Sequence[str],
    known: Mapping[str, Sequence[tuple[str, str]]] | None = None,
    properties: Mapping[str, str] | None = None,
) -> dict[str, int]:
    """Append the typed images of `rows` (raw binlog rows with table_name, dt and hour) for each of `tables` not
    in its images table yet (by `event_uid`, over the days the rows touch), one commit per table; returns the
    rows written per table. Idempotent: re-landing the same offsets writes nothing twice, and a landing whose
    raw rows were written but not its images writes the images on its re-run."""
    known = known or {}
    ddl = _ddl_by_table(rows)
    current = {t: _current_fields(store, database, t) for t in tables}
    days: dict[str, list[str]] = {}
    for r in rows.select("table_name", "dt").distinct().collect():
        days.setdefault(r.table_name, []).append(r.dt)
    # The JSON values type only the tables with no schema yet: with one, a column neither it nor the DDL has is
    # not a column of the ODS table (the merge keeps the state's columns and those the DDL adds).
    unknown = [t for t in tables if not current[t] and not known.get(t)]
    found = (
        images.json_columns_by_table(rows.where(F.col("table_name").isin(unknown)), by="table_name")
        if unknown
        else {}
    )
    plans = {}
    for table in sorted(tables):
        columns = images.image_columns(
            None,
            ddl.get(table, ()),
            known=_union(current[table], known.get(table, ())),
            found=[(c, _wide(t)) for c, t in found.get(table, [])],
        )
        if columns:  # else only DDL and truncates with no schema to type by yet: they stay in the raw table
            plans[table] = columns

    def write(table: str) -> int:
        ref = images_table_ref(database, table)
        mine = rows.where(F.col("table_name") == table)
        typed = images.typed_images(mine, plans[table])
        if current[table]:
            kept = (
                store.spark.table(store.name(ref))
                .where(F.col("dt").isin(days.get(table, [])))
                .select("event_uid")
            )
            typed = typed.join(kept, "event_uid", "left_anti").select(*typed.columns)
        return store.append(ref, typed.drop("table_name"), properties=properties)

    # One commit per table, one after the other: the catalog may be a SQLite file, which takes one writer.
    return {table: write(table) for table in plans}


def _current_fields(store: IcebergTables, database: str, table: str) -> list[tuple[str, str]]:
    ref = images_table_ref(database, table)
    return images.image_fields(store.spark.table(store.name(ref))) if store.exists(ref) else []


def read_typed_images(
    store: IcebergTables, database: str, table: str, day: str | Sequence[str]
) -> DataFrame | None:
    """The typed changes of `table` on `day` (or on each of several days), or None when the landing wrote no
    images table for it."""
    ref = images_table_ref(database, table)
    if not store.exists(ref):
        return None
    days = [day] if isinstance(day, str) else list(day)
    return store.spark.table(store.name(ref)).where(F.col("dt").isin(*days))


def _ddl_by_table(rows: DataFrame) -> dict[str, list[str]]:
    statements = (
        rows.where((F.col("op") == "ddl") & F.col("ddl_sql").isNotNull())
        .select("table_name", "binlog_seq", "ddl_sql")
        .orderBy("binlog_seq")
        .collect()
    )
    out: dict[str, list[str]] = {}
    for r in statements:
        out.setdefault(r.table_name, []).append(r.ddl_sql)
    return out


def _wide(typ: str) -> str:
    """A JSON-typed decimal column as wide as a later hour's values may need: the first hours' values fix the
    images table's type, and a wider value later would not fit (the merge casts to the state's own type)."""
    if not typ.startswith("decimal("):
        return typ
    scale = int(typ[len("decimal(") :].rstrip(")").split(",")[1])
    return f"decimal(38,{max(scale, WIDE_DECIMAL_SCALE)})"


def _union(first: Sequence[tuple[str, str]], then: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    seen = {c.lower() for c, _ in first}
    return [*first, *((c, t) for c, t in then if c.lower() not in seen)]
