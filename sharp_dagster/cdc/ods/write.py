"""How a day's merged rows land on the staging branch of an ODS table's two Iceberg tables (`merge.merge_into`
calls `write_rows`): merge-on-read, so the rows it replaces get deletion vectors, the new ones are appended, and
nothing of the untouched state is rewritten.

`ods.<table>` gets a `DELETE FROM` of the rows it holds of the day's keys (the held keys broadcast past a key-only
scan of the state) and one `INSERT INTO` of every live row of the day; `ods_state.<table>` a `MERGE INTO` from the
keys and positions of the rows that can change it. Which keys each table holds is what the merge's one look at the
state found (`HELD`, `DEAD`), so neither table is looked at again. Nothing here imports Dagster.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from sharp_dagster.cdc.merge.plan import MergePlan
from sharp_dagster.cdc.merge.result import DELETED_COLUMN, SEQ_COLUMN
from sharp_dagster.cdc.ods import store as ods_store
from sharp_dagster.cdc.ods.versions import ods_ref, tombstones_ref
from sharp_dagster.spark.iceberg import IcebergTables
from sharp_dagster.spark.java import java_dataset

# The columns of `DayRows.flagged` that say the state held the key as a live row (so `ods.<table>` holds it), or
# as a tombstone (so `ods_state.<table>` holds it).
HELD = "__held"
DEAD = "__dead"


def tombstone_columns(plan: MergePlan) -> list[str]:
    """What a tombstone keeps besides its position: the key, and the shard column (truncates are scoped by it)."""
    extra = [plan.shard] if plan.shard and not plan.shard_in_key else []
    return [*plan.keys, *extra]


def write_rows(
    store: IcebergTables,
    table: str,
    branch: str,
    view: str,
    plan: MergePlan,
    null_key: bool,
    small: bool,
    counts: tuple[int, int] | None = None,
    local: bool = False,
    tombstones: bool = True,
) -> None:
    """The touched keys' rows on the branch: `ods.<table>` gets their live rows, `ods_state.<table>` their
    tombstones. `view` holds `DayRows.flagged`: which keys each table holds is what the state look of `day_rows`
    found, so neither is looked at again. `ods`: the rows it holds of those keys deleted, then the day's live rows
    appended (`_replace`); rows too many to broadcast (not `DayRows.small`) take one `MERGE INTO` with an insert
    clause (an outer join: both sides shuffled). `ods_state`: one `MERGE INTO` from the key, position and deleted
    flag of the rows it can change: the day's tombstones and the keys it holds (`DEAD`), a small source whatever
    the day's size. `counts`: the held keys and live rows of the view when known (`DayRows`), so no job asks.
    `local`: the view is held on the driver (`DayRows.local`): its held keys need no cache nor count. Without
    `tombstones` (the day deleted no key and `ods_state` holds none of its keys) `ods_state` is not written."""
    eq = "<=>" if null_key else "="  # a plain equi-join probes a faster hash table
    on = " AND ".join(f"t.`{k}` {eq} s.`{k}`" for k in plan.keys)
    live_cols = [c for c, _ in plan.columns] + [SEQ_COLUMN]
    dead_cols = [*tombstone_columns(plan), SEQ_COLUMN]
    deleted = f"s.`{DELETED_COLUMN}`"
    ods, dead = (f"{store.name(ref)}.`branch_{branch}`" for ref in (ods_ref(table), tombstones_ref(table)))
    if not small:
        matched = f"WHEN MATCHED AND {deleted} THEN DELETE WHEN MATCHED THEN UPDATE SET {_assign(live_cols)} "
        inserted = f"WHEN NOT MATCHED AND NOT {deleted} THEN INSERT {_insert(live_cols)}"
        store.spark.sql(f"MERGE INTO {ods} t USING {view} s ON {on} {matched}{inserted}")
    else:
        _replace(store.spark, ods, store.spark.table(view), plan.keys, null_key, live_cols, counts, local)
    if tombstones:
        _merge_tombstones(store, dead, view, on, dead_cols)
    for ref in ods_store.both(table):
        store.refresh(ref)


def _merge_tombstones(store: IcebergTables, dead: str, view: str, on: str, dead_cols: list[str]) -> None:
    """`ods_state`'s rows of the day: its tombstones written, the keys it brought back removed."""
    deleted = f"s.`{DELETED_COLUMN}`"
    source = (
        f"(SELECT {_names([*dead_cols, DELETED_COLUMN])} FROM {view} WHERE `{DELETED_COLUMN}` OR `{DEAD}`)"
    )
    store.spark.sql(
        f"MERGE INTO {dead} t USING {source} s ON {on} "
        f"WHEN MATCHED AND NOT {deleted} THEN DELETE "
        f"WHEN MATCHED THEN UPDATE SET t.`{SEQ_COLUMN}` = s.`{SEQ_COLUMN}` "
        f"WHEN NOT MATCHED AND {deleted} THEN INSERT {_insert(dead_cols)}"
    )


def _replace(
    spark: SparkSession,
    ods: str,
    flagged: DataFrame,
    keys: Sequence[str],
    null_key: bool,
    columns: list[str],
    counts: tuple[int, int] | None = None,
    local: bool = False,
) -> None:
    """`ods`' rows of the held keys deleted, then every live row of the day appended: a `DELETE FROM` (a
    broadcast semi join past a key-only scan, merge-on-read: deletion vectors) and one `INSERT INTO`. Not a
    `MERGE INTO`: that shuffles the matched rows by row id for its cardinality check (pointless: the day has
    one row per key) and carries the v3 row-lineage columns. An empty step commits nothing (`counts`: the held
    keys and live rows when known, else counted here)."""
    if counts is None or counts[0]:
        _delete_held(spark, ods, flagged, keys, null_key, local)
    live = flagged.where(~F.col(DELETED_COLUMN))
    if (counts[1] > 0) if counts is not None else not live.isEmpty():
        with temp_view(live) as source:
            names = _names(columns)  # by name: an added column sits after `_binlog_seq` in the table
            spark.sql(f"INSERT INTO {ods} ({names}) SELECT {names} FROM {source}")


def _delete_held(
    spark: SparkSession,
    ods: str,
    flagged: DataFrame,
    keys: Sequence[str],
    null_key: bool,
    local: bool = False,
) -> None:
    """`ods`' rows of the held keys deleted (merge-on-read: deletion vectors), the keys broadcast by their size.
    `local`: `flagged` is held on the driver, its held keys counted already (not cached, not counted again)."""
    held = flagged.where(F.col(HELD)).select(*[F.col(f"`{k}`") for k in keys])
    held = held if local else held.cache()
    try:
        if local or held.count():
            # Broadcast by its size (a cached frame's statistics are its real size once computed), whatever the
            # session's threshold: the semi join then never shuffles the state.
            size = int(java_dataset(held).queryExecution().optimizedPlan().stats().sizeInBytes())
            with temp_view(held) as source, _broadcast_up_to(spark, size):
                spark.sql(f"DELETE FROM {ods} t WHERE {_held_condition(source, keys, null_key)}")
    finally:
        held.unpersist()


def _held_condition(source: str, keys: Sequence[str], null_key: bool) -> str:
    """`ods`' rows whose key is in `source`: an IN (multi-column for a composite key); with a null in a key
    column, a correlated EXISTS matching null-safely (`<=>`), since IN never matches a null."""
    if null_key:
        on = " AND ".join(f"t.`{k}` <=> s.`{k}`" for k in keys)
        return f"EXISTS (SELECT 1 FROM {source} s WHERE {on})"
    target = ", ".join(f"t.`{k}`" for k in keys)
    target = target if len(keys) == 1 else f"({target})"
    return f"{target} IN (SELECT {_names(keys)} FROM {source})"


@contextmanager
def _broadcast_up_to(spark: SparkSession, size: int) -> Iterator[None]:
    """Spark broadcasts a join side of up to `size` bytes (by its statistics) while in this block."""
    key = "spark.sql.autoBroadcastJoinThreshold"
    before = spark.conf.get(key, None)
    spark.conf.set(key, str(size + 1))
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, before)


@contextmanager
def temp_view(df: DataFrame) -> Iterator[str]:
    name = f"__ods_day_{uuid.uuid4().hex}"
    df.createOrReplaceTempView(name)
    try:
        yield name
    finally:
        df.sparkSession.catalog.dropTempView(name)


def _names(columns: Sequence[str]) -> str:
    return ", ".join(f"`{c}`" for c in columns)


def _assign(columns: Sequence[str]) -> str:
    return ", ".join(f"t.`{c}` = s.`{c}`" for c in columns)


def _insert(columns: Sequence[str]) -> str:
    names = ", ".join(f"`{c}`" for c in columns)
    return f"({names}) VALUES ({', '.join(f's.`{c}`' for c in columns)})"
