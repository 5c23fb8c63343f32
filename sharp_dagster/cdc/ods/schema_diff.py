"""What a staged ODS day changed in its table's columns, compared with the previous published day, by Iceberg field id.

Iceberg gives every column a field id that a rename keeps: the same id under another name is a RENAME, the same id
with another type a retype (MODIFY: Iceberg's promotions int -> bigint, float -> double, decimal precision up), an
id the earlier schema has and the staged one lacks a DROP. A new id is an added column: nothing downstream can read
it yet, so it is no change here. The previous day's schema is the one its tag's snapshot was written with; the
staged day's is the table's current schema, the one `main` is read with once the day is published (an ALTER TABLE
commits a new current schema, whether or not the day then writes rows).

`day_changes` reads both through the table's Java object (`IcebergTables.java_table`); `diff` is the comparison
itself. The ODS asset's schema check (`assets/ods_schema_check.py`) names what each change breaks downstream. No
Dagster import.

    >>> before = {1: Field(1, "order_id", "long"), 2: Field(2, "order_status", "string"), 3: Field(3, "n", "int")}
    >>> after = {1: Field(1, "order_id", "long"), 2: Field(2, "status", "string"), 4: Field(4, "x", "int")}
    >>> [c.describe() for c in diff(before, after)]
    ['order_status renamed to status', 'n dropped']
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sharp_dagster.cdc.ods import store as ods_store
from sharp_dagster.cdc.ods.versions import day_tag, ods_ref, previous_day
from sharp_dagster.spark.iceberg import IcebergTables

__all__ = ["Field", "SchemaChange", "day_changes", "diff", "fields"]

RENAME, RETYPE, DROP = "rename", "retype", "drop"


@dataclass(frozen=True)
class Field:
    id: int
    name: str
    type: str


@dataclass(frozen=True)
class SchemaChange:
    """One column of the previous day changed by the staged day: `column` is its name before, as the SQL that
    reads it names it; `new_name`/`new_type` what the staged schema has (None for a drop)."""

    kind: str  # rename, retype or drop
    column: str
    field_id: int
    old_type: str
    new_name: str | None = None
    new_type: str | None = None

    def describe(self) -> str:
        if self.kind == DROP:
            return f"{self.column} dropped"
        parts = []
        if self.new_name != self.column:
            parts.append(f"renamed to {self.new_name}")
        if self.new_type != self.old_type:
            parts.append(f"retyped {self.old_type} -> {self.new_type}")
        return f"{self.column} {' and '.join(parts)}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "column": self.column,
            "field_id": self.field_id,
            "old_type": self.old_type,
            "new_name": self.new_name,
            "new_type": self.new_type,
        }


def fields(schema: Any) -> dict[int, Field]:
    """The top-level columns of a Java `org.apache.iceberg.Schema`, by field id."""
    out = {}
    for column in schema.columns():
        field_id = int(column.fieldId())
        out[field_id] = Field(field_id, str(column.name()), str(column.type().toString()))
    return out


def diff(before: Mapping[int, Field], after: Mapping[int, Field]) -> list[SchemaChange]:
    """The columns of `before` that `after` renamed, retyped (a rename and a retype of one column: one change,
    kind rename) or dropped, in `before`'s order."""
    out = []
    for field_id, old in before.items():
        new = after.get(field_id)
        if new is None:
            out.append(SchemaChange(DROP, old.name, field_id, old.type))
        elif new.name != old.name or new.type != old.type:
            kind = RENAME if new.name != old.name else RETYPE
            out.append(SchemaChange(kind, old.name, field_id, old.type, new.name, new.type))
    return out


def day_changes(store: IcebergTables, table: str, day: str) -> tuple[str | None, list[SchemaChange]]:
    """(the previous published day, the changes of `ods.<table>`'s staged schema since it); (None, []) when the
    day before `day` has no tag (the first day after a bootstrap is compared with the bootstrap's tag, which it
    has)."""
    ref = ods_ref(table)
    previous = previous_day(day)
    snapshot = ods_store.ref_snapshot(store, ref, day_tag(previous))
    if snapshot is None:
        return None, []
    java = store.java_table(ref)
    schema_id = java.snapshot(snapshot).schemaId()
    before = java.schemas().get(schema_id) if schema_id is not None else None
    if before is None:  # a snapshot written before schema ids were kept: the oldest schema is its
        before = java.schemas().get(min(int(k) for k in java.schemas().keySet()))
    return previous, diff(fields(before), fields(java.schema()))
