"""The snapshot references of an ODS table's two Iceberg tables (`ods_versions`): create them, cut a day's staging
branch at the previous day's tag, read a day (a tag) or a staged day (a branch) as the merge's state, publish
staged days (fence, move `main`, tag each day) and roll `main` back to a day.

Both tables (`ods.<table>`: live rows; `ods_state.<table>`: tombstones) move together: a staging branch of the same
name on each, the same day tags. Every reference change is one of `spark/refs.py`'s (one commit per table, retried
when another writer committed first); nothing here imports Dagster.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sharp_dagster.cdc.merge.result import DELETED_COLUMN, SEQ_COLUMN, SEQ_TYPE
from sharp_dagster.cdc.ods.versions import ODS_TABLE_PROPERTIES, day_tag, is_day_tag, ods_ref, tombstones_ref
from sharp_dagster.spark import refs
from sharp_dagster.spark.iceberg import IcebergTables
from sharp_dagster.spark.refs import RefChanges
from sharp_dagster.spark.tables import TableRef
from sharp_dagster.spark.wap import StalePublishError


@dataclass(frozen=True)
class StagedDay:
    """A day merged onto a branch: the branch's head on (`ods.<table>`, `ods_state.<table>`) and what it wrote."""

    day: str
    heads: tuple[int, int]
    changed: int  # keys the day touched (rows written to either table)


def both(table: str) -> tuple[TableRef, TableRef]:
    return ods_ref(table), tombstones_ref(table)


def create_tables(
    store: IcebergTables, table: str, columns: Sequence[tuple[str, str]], tombstone_columns: Sequence[str]
) -> None:
    """Create `ods.<table>` (data columns + `_binlog_seq`) and `ods_state.<table>` (`tombstone_columns` +
    `_binlog_seq`) unless they exist, each with one empty snapshot so that a tag can point at it."""
    data = [*columns, (SEQ_COLUMN, SEQ_TYPE)]
    types = dict(columns)
    dead = [(c, types[c]) for c in tombstone_columns] + [(SEQ_COLUMN, SEQ_TYPE)]
    for ref, cols in ((ods_ref(table), data), (tombstones_ref(table), dead)):
        if store.exists(ref):
            continue
        store.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {store.catalog}.{ref.database}")
        schema = ", ".join(f"`{c}` {t}" for c, t in cols)
        props = ", ".join(f"'{k}' = '{v}'" for k, v in ODS_TABLE_PROPERTIES.items())
        store.spark.sql(f"CREATE TABLE {store.name(ref)} ({schema}) USING iceberg TBLPROPERTIES ({props})")
        refs.empty_snapshot(store, ref)  # the first day's tag needs a snapshot


def exists(store: IcebergTables, table: str) -> bool:
    return store.exists(ods_ref(table))


def ref_snapshot(store: IcebergTables, ref: TableRef, name: str) -> int | None:
    """The snapshot a branch or tag (or `main`) of `ref` points at, None when it has no such reference."""
    return refs.ref_snapshot(store, ref, name)


def published_days(store: IcebergTables, table: str) -> list[str]:
    """The days `ods.<table>` has a tag for, oldest first."""
    if not exists(store, table):
        return []
    return [name for name in refs.tags(store, ods_ref(table)) if is_day_tag(name)]


def cut(store: IcebergTables, table: str, branch: str, day: str) -> int:
    """Create (or re-create) `branch` on both tables at day `day`'s tag; returns `ods.<table>`'s `main` head then
    (what `publish_days` fences on)."""
    tag = day_tag(day)
    for ref in both(table):
        refs.change(
            store,
            ref,
            lambda c: c.cut_branch(branch, c.require(tag, f"day {day} was never published", "tag")),
        )
    return ref_snapshot(store, ods_ref(table), "main")


def read_version(store: IcebergTables, table: str, version: str) -> DataFrame:
    """The live rows of `ods.<table>` at a tag or branch (data columns and `_binlog_seq`)."""
    return store.spark.sql(f"SELECT * FROM {store.name(ods_ref(table))} VERSION AS OF '{version}'")


def state_at(store: IcebergTables, table: str, version: str) -> DataFrame:
    """The merge's state at a tag or branch, as `merge.merge_day` takes and gives it: the live rows with
    `_is_deleted` false, then the tombstones (key, shard, position; other columns null) with `_is_deleted` true."""
    live = read_version(store, table, version)
    dead = store.spark.sql(f"SELECT * FROM {store.name(tombstones_ref(table))} VERSION AS OF '{version}'")
    types = {f.name: f.dataType.simpleString() for f in live.schema}
    kept = set(dead.columns)
    dead = dead.select(
        *[(F.col(f"`{c}`") if c in kept else F.lit(None)).cast(t).alias(c) for c, t in types.items()]
    )
    return live.withColumn(DELETED_COLUMN, F.lit(False)).unionByName(
        dead.withColumn(DELETED_COLUMN, F.lit(True))
    )


def publish_days(
    store: IcebergTables,
    table: str,
    branch: str,
    heads: Mapping[str, tuple[int, int]],
    expected_main: int | None,
) -> int:
    """Put the staged days on `main` and tag each: `heads` maps each staged day to its snapshot on the branch of
    (`ods.<table>`, `ods_state.<table>`). The fence: `ods.<table>`'s `main` must still be `expected_main` (its
    head when the branch was cut), else `StalePublishError` and nothing moves. `main` is fast-forwarded to the
    branch when the branch grew from it (a new day), else replaced (a re-run of an earlier day). The tombstones are
    committed first, `ods.<table>` last (its commit is the publish readers see). Returns `ods`'s new head."""
    days = sorted(heads)
    main_now = ref_snapshot(store, ods_ref(table), "main")
    if main_now != expected_main:  # checked before the tombstones move too (and again in `ods`'s own commit)
        raise StalePublishError(
            f"cannot publish ods.{table} {days}: main moved since branch {branch} was cut "
            f"({expected_main} -> {main_now})"
        )
    for index, ref in ((1, tombstones_ref(table)), (0, ods_ref(table))):
        fenced = ref == ods_ref(table)

        def build(c: RefChanges, ref: TableRef = ref, index: int = index, fenced: bool = fenced) -> None:
            if not c.has(branch):
                raise StalePublishError(f"cannot publish {ref.qualified} {days}: branch {branch} is gone")
            if fenced and c.main() != expected_main:
                raise StalePublishError(
                    f"cannot publish {ref.qualified} {days}: main moved since branch {branch} was cut "
                    f"({expected_main} -> {c.main()})"
                )
            c.move_main(branch)
            for day in days:
                c.tag(day_tag(day), heads[day][index])
            c.drop_branch(branch)

        refs.change(store, ref, build)
    return ref_snapshot(store, ods_ref(table), "main")


def drop_branch(store: IcebergTables, table: str, branch: str) -> None:
    for ref in both(table):
        if store.exists(ref):
            store.drop_branches(ref, [branch])


def rollback_to_day(
    store: IcebergTables, table: str, day: str, expected_main: int | None = None
) -> list[str]:
    """Move `main` of both tables back to day `day`'s tag and drop the tags of the later days (no longer
    published); returns those later days. With `expected_main`, refuse (`StalePublishError`, nothing moved) when
    `ods.<table>`'s `main` is no longer there: the caller decided what to undo from what it read."""
    tag = day_tag(day)
    later = [d for d in published_days(store, table) if d > day]
    for ref in both(table):

        def build(c: RefChanges, ref: TableRef = ref) -> None:
            at = c.require(tag, f"day {day} was never published", "tag")
            if expected_main is not None and ref == ods_ref(table) and c.main() != expected_main:
                raise StalePublishError(
                    f"{ref.qualified}: main moved to snapshot {c.main()} since it was read at {expected_main}"
                )
            c.replace_main(at)
            for d in later:
                c.drop_tag(day_tag(d))

        refs.change(store, ref, build)
    return later
