"""How Spark's analyzed plan names the table a relation reads, in the parser's terms (`db.table`, lower case).

This module owns the table names of `spark_plan.py` and the comparison's (`runtime.py`). A v1 relation
(`LogicalRelation`, `HiveTableRelation`) carries its `CatalogTable`. Tables of a v2 catalog (the warehouse's
Iceberg catalog `sharp` / `sharp_<hash>`): the JSON of a `DataSourceV2Relation` has its `table`, `catalog` and
`identifier` as null; the name is taken from the analyzer's `SubqueryAlias` right above it (`sharp.ods.orders`),
the catalog part dropped (`ods.orders`), and an Iceberg branch, tag, snapshot or metadata-table read
(`ods.orders.branch_stage_x`, `ods.orders.snapshots`) counts as a read of its base table. A time-travel read
(`ods.orders VERSION AS OF '2024-01-03'`) is aliased by the table itself: `ods.orders`.

    >>> base_table(["sharp", "ods", "orders", "tag_2024-01-03"], has_catalog=True)
    'ods.orders'

No Dagster import, no Spark import.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["alias_table", "base_table", "is_table_selector", "table_name"]

# Iceberg's selectors after `db.table` (SparkCatalog: branch_<b>, tag_<t>, snapshot_id_<n>, at_timestamp_<ms>) and
# its metadata table names: a read of any of them reads the base table.
_ICEBERG_SELECTOR = re.compile(r"^(branch_.+|tag_.+|snapshot_id_\d+|at_timestamp_\d+)$")
_ICEBERG_METADATA_TABLES = {
    "entries",
    "files",
    "data_files",
    "delete_files",
    "history",
    "metadata_log_entries",
    "snapshots",
    "refs",
    "manifests",
    "partitions",
    "position_deletes",
    "all_data_files",
    "all_delete_files",
    "all_files",
    "all_manifests",
    "all_entries",
}


def table_name(identifier: Any) -> str | None:
    """`db.table` from a serialized TableIdentifier / CatalogTable / v2 Identifier, lower case."""
    if not isinstance(identifier, dict):
        return None
    if "identifier" in identifier and isinstance(identifier["identifier"], dict):
        return table_name(identifier["identifier"])
    name = identifier.get("table") or identifier.get("name")
    if not isinstance(name, str):
        return None
    db = identifier.get("database")
    if db is None and isinstance(identifier.get("namespace"), list) and identifier["namespace"]:
        # A v2 Identifier: an Iceberg branch/metadata read has the table in the namespace, the selector as name.
        return base_table([*(str(p) for p in identifier["namespace"]), name], has_catalog=False)
    return (f"{db}.{name}" if db else name).lower()


def is_table_selector(part: str) -> bool:
    """Is `part` (the last part of `db.table.<part>`) an Iceberg branch, tag, snapshot or metadata-table selector?"""
    part = part.lower().strip("`")
    return bool(_ICEBERG_SELECTOR.match(part)) or part in _ICEBERG_METADATA_TABLES


def base_table(parts: list[str], has_catalog: bool) -> str:
    """`db.table` (lower case) of a multi-part table name: the catalog part dropped when `has_catalog`, then a
    trailing Iceberg selector (`db.table.branch_x`, `db.table.snapshots`) dropped: it reads the base table."""
    parts = [p.lower().strip("`") for p in parts if p]
    if has_catalog and len(parts) > 1:
        parts = parts[1:]
    while len(parts) > 2 and is_table_selector(parts[-1]):
        parts = parts[:-1]
    return ".".join(parts)


def _qualifier(value: Any) -> list[str]:
    """An `AliasIdentifier.qualifier`: Catalyst's JSON writes the Seq as its string `[a, b]` (a list is accepted)."""
    if isinstance(value, list):
        return [str(p) for p in value]
    if isinstance(value, str):
        inner = value.strip()
        if inner.startswith("[") and inner.endswith("]"):
            inner = inner[1:-1]
        return [p.strip() for p in inner.split(",") if p.strip()]
    return []


def alias_table(ident: Any) -> str | None:
    """The table named by the analyzer's `SubqueryAlias` over a v2 relation (its serialized `identifier`):
    `catalog.db.table[.selector]` gives `db.table`. A user's alias (`FROM t AS x`, `df.alias("x")`) has no
    qualifier and names no table."""
    if not isinstance(ident, dict) or not isinstance(ident.get("name"), str):
        return None
    qualifier = _qualifier(ident.get("qualifier"))
    if not qualifier:
        return None
    return base_table([*qualifier, ident["name"]], has_catalog=True)
