"""The data columns of each ODS table's current state `ods.<table>`: what the landing types a table's row images
by (`land(image_columns=)`), so the typed images and the state agree on every column's type.
"""

from __future__ import annotations

from collections.abc import Iterable

from sharp_dagster.cdc.merge.fold import STATE_COLUMNS
from sharp_dagster.cdc.ods.versions import ods_ref
from sharp_dagster.cdc.source.config import TableConfig
from sharp_dagster.cdc.source.shards import PHYSICAL_TABLE_COLUMN
from sharp_dagster.spark.iceberg import IcebergTables


def state_columns(store: IcebergTables, tables: Iterable[TableConfig]) -> dict[str, list[tuple[str, str]]]:
    """The data columns (name, Spark type) of each table's `ods.<table>`, where it exists; the state's own columns
    (`_binlog_seq`, ...) and a sharded table's physical-table column left out."""
    out: dict[str, list[tuple[str, str]]] = {}
    for table in tables:
        ref = ods_ref(table.name)
        if not store.exists(ref):
            continue
        skip = {*STATE_COLUMNS, *([PHYSICAL_TABLE_COLUMN] if table.shard_regex else [])}
        schema = store.spark.table(store.name(ref)).schema
        out[table.name] = [(f.name, f.dataType.simpleString()) for f in schema if f.name not in skip]
    return out
