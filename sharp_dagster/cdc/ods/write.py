"""How a day's merged rows land on the staging branch of an ODS table's two Iceberg tables (`merge.merge_into`
calls `write_day`): merge-on-read, so the rows it replaces get deletion vectors, the new ones are appended, and
nothing of the untouched state is rewritten.

`ods.<table>` gets a `DELETE FROM` of the rows it holds of the day's keys (the held keys broadcast past a key-only
scan of the state) and one `INSERT INTO` of every live row of the day; `ods_state.<table>` a `MERGE INTO` from the
keys and positions of the rows that can change it. Which keys each table holds is what the merge's one look at the
state found (`HELD`, `DEAD`), so neither table is looked at again. Nothing here imports Dagster.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from sharp_dagster.cdc.merge.plan import MergePlan
from sharp_dagster.cdc.merge.result import DELETED_COLUMN, SEQ_COLUMN
from sharp_dagster.cdc.ods import store as ods_store
from sharp_dagster.cdc.ods.versions import ods_ref, tombstones_ref
from sharp_dagster.spark.commit_properties import with_snapshot_properties
from sharp_dagster.spark.iceberg import IcebergTables
from sharp_dagster.spark.java import java_dataset

# The columns of `DayRows.flagged` that say the state held the key as a live row (so `ods.<table>` holds it), or
# as a tombstone (so `ods_state.<table>` holds it).
HELD = "__held"
DEAD = "__dead"


def flags(before: Column | None) -> list[Column]:
    """`HELD` and `DEAD` of a key's row after a day, from `before`: the `_is_deleted` of the key's row before the
    day (null where there was none). None: no state side at all, so neither table holds the key."""
    if before is None:
        return [F.lit(False).alias(HELD), F.lit(False).alias(DEAD)]
    return [F.coalesce(~before, F.lit(False)).alias(HELD), F.coalesce(before, F.lit(False)).alias(DEAD)]


def tombstone_columns(plan: MergePlan) -> list[str]:
    """What a tombstone keeps besides its position: the key, and the shard column (truncates are scoped by it)."""
    extra = [plan.shard] if plan.shard and not plan.shard_in_key else []
    return [*plan.keys, *extra]


def write_day(
    store: IcebergTables,
    table: str,
    branch: str,
    flagged: DataFrame,
    plan: MergePlan,
    properties: Mapping[str, str] | None,
    null_key: bool,
    small: bool,
    counts: tuple[int, int] | None = None,
    local: bool = False,
    tombstones: bool = True,
) -> None:
    """A day's rows committed on the branch, every commit carrying `properties` (the attempt's:
    `wap.snapshot_properties`): `ods.<table>` gets their live rows, `ods_state.<table>` their tombstones. `flagged`
    is `DayRows.flagged` (or a day of a range's rows): which keys each table holds is what the state look found
    (`HELD`, `DEAD`), so neither is looked at again. `ods`: the rows it holds of those keys deleted, then the day's
    live rows appended (`_replace`); rows too many to broadcast (not `small`) take one `MERGE INTO` with an insert
    clause (an outer join: both sides shuffled). `ods_state`: the tombstones it holds of the day's keys deleted and
    the day's appended (`_write_tombstones`); past the broadcast bound, one `MERGE INTO` from the key, position and
    deleted flag of the rows it can change. `counts`: the held keys and live rows when known (`DayRows`), so no
    job asks. `local`: `flagged` is held on the driver (`DayRows.local`): its held keys need no cache nor count.
    Without `tombstones` (the day deleted no key and `ods_state` holds none of its keys) `ods_state` is not
    written."""
    eq = "<=>" if null_key else "="  # a plain equi-join probes a faster hash table
    on = " AND ".join(f"t.`{k}` {eq} s.`{k}`" for k in plan.keys)
    live_cols = [c for c, _ in plan.columns] + [SEQ_COLUMN]
    dead_cols = [*tombstone_columns(plan), SEQ_COLUMN]
    deleted = f"s.`{DELETED_COLUMN}`"
    ods, dead = (f"{store.name(ref)}.`branch_{branch}`" for ref in (ods_ref(table), tombstones_ref(table)))

    def writes() -> None:
        with temp_view(flagged) as view:
            if not small:
                matched = f"WHEN MATCHED AND {deleted} THEN DELETE WHEN MATCHED THEN UPDATE SET {_assign(live_cols)} "
                inserted = f"WHEN NOT MATCHED AND NOT {deleted} THEN INSERT {_insert(live_cols)}"
                store.spark.sql(f"MERGE INTO {ods} t USING {view} s ON {on} {matched}{inserted}")
            else:
                _replace(store.spark, ods, flagged, plan.keys, null_key, live_cols, counts, local)
            if tombstones and small:
                _write_tombstones(store.spark, dead, flagged, plan.keys, null_key, dead_cols, local)
            elif tombstones:
                _merge_tombstones(store, dead, view, on, dead_cols)

    with_snapshot_properties(store.spark, properties, writes)
    for ref in ods_store.both(table):
        store.refresh(ref)


def _write_tombstones(
    spark: SparkSession,
    dead: str,
    flagged: DataFrame,
    keys: Sequence[str],
    null_key: bool,
    dead_cols: list[str],
    local: bool,
) -> None:
    """`ods_state`'s rows of the day: the tombstones it holds of the day's keys (`DEAD`) deleted, then the day's
    tombstones appended (a key deleted again gets its new position, a key brought back has none). Two plain
    writes, as for `ods` (`_replace`), not a `MERGE INTO`: that shuffles both sides for its outer join."""
    _delete_held(spark, dead, flagged, keys, null_key, local, flag=DEAD)
    tombstones = flagged.where(F.col(DELETED_COLUMN))
    if tombstones.isEmpty():  # held on the driver: no job
        return
    with temp_view(tombstones) as source:
        names = _names(dead_cols)
        spark.sql(f"INSERT INTO {dead} ({names}) SELECT {names} FROM {source}")


def _merge_tombstones(store: IcebergTables, dead: str, view: str, on: str, dead_cols: list[str]) -> None:
    """`ods_state`'s rows of a day too big to broadcast its keys: its tombstones written, the keys it brought back
    removed, in one `MERGE INTO`."""
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
    table: str,
    flagged: DataFrame,
    keys: Sequence[str],
    null_key: bool,
    local: bool = False,
    flag: str = HELD,
) -> None:
    """The rows of `table` (`ods`, or `ods_state` with `flag` DEAD) whose key `flagged` marks with `flag` deleted
    (merge-on-read: deletion vectors). `local`: `flagged` is held on the driver, its held keys counted already: a
    few of a plain type are named as literals (`literal_condition`: no broadcast job, and Iceberg skips the files
    whose bounds hold none); else the keys are broadcast by their size past a semi join."""
    held = flagged.where(F.col(flag)).select(*[F.col(f"`{k}`") for k in keys])
    if local and held.isEmpty():  # held on the driver: no job
        return
    condition = literal_condition(held, keys) if local and not null_key else None
    if condition is not None:
        spark.sql(f"DELETE FROM {table} t WHERE {condition}")
        return
    held = held if local else held.cache()
    try:
        if local or held.count():
            # Broadcast by its size (a cached frame's statistics are its real size once computed), whatever the
            # session's threshold: the semi join then never shuffles the state.
            size = int(java_dataset(held).queryExecution().optimizedPlan().stats().sizeInBytes())
            with temp_view(held) as source, _broadcast_up_to(spark, size):
                spark.sql(f"DELETE FROM {table} t WHERE {_held_condition(source, keys, null_key)}")
    finally:
        held.unpersist()


# Keys at most which `literal_condition` names (one key column; a composite key's are fewer: an OR of them).
LITERAL_KEYS_MAX = 1_000
LITERAL_COMPOSITE_KEYS_MAX = 100
LITERAL_KEY_TYPES = ("tinyint", "smallint", "int", "bigint", "string", "date", "decimal")


def literal_condition(keys_df: DataFrame, keys: Sequence[str]) -> str | None:
    """A SQL condition matching the rows whose key is one of `keys_df`'s rows (held on the driver: read without a
    job), as literals: `k IN (...)` for one key column, an OR of key equalities for a composite key. None when
    there are too many, a key is null, or a key column's type is not one whose literal is plain (`LITERAL_KEY_TYPES`).

    >>> from types import SimpleNamespace as N
    >>> rows = [("it's", 3)]
    >>> frame = N(dtypes=[("a", "string"), ("b", "bigint")], collect=lambda: rows)
    >>> print(literal_condition(frame, ["a", "b"]))
    (`a` = 'it\\'s' AND `b` = 3)
    """
    types = [t for _, t in keys_df.dtypes]
    if any(t.split("(")[0] not in LITERAL_KEY_TYPES for t in types):
        return None
    limit = LITERAL_KEYS_MAX if len(keys) == 1 else LITERAL_COMPOSITE_KEYS_MAX
    rows = keys_df.collect()
    if not rows or len(rows) > limit or any(v is None for row in rows for v in row):
        return None
    if len(keys) == 1:
        return f"`{keys[0]}` IN ({', '.join(_literal(row[0], types[0]) for row in rows)})"
    terms = [
        "("
        + " AND ".join(f"`{k}` = {_literal(v, t)}" for k, v, t in zip(keys, row, types, strict=True))
        + ")"
        for row in rows
    ]
    return " OR ".join(terms)


def _literal(value: object, typ: str) -> str:
    """A key value as a Spark SQL literal of its column's type (`LITERAL_KEY_TYPES`)."""
    if typ == "string":
        return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"
    if typ == "date":
        return f"DATE '{value.isoformat()}'"
    if typ.startswith("decimal"):
        return format(value, "f")
    return str(int(value))


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
