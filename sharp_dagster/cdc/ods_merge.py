"""A day's merge into the current-state ODS layout (`ods_versions`): only the rows the day's changes produce, plus
deletes of the rows they replace, written merge-on-read on a staging branch.

`day_rows` is `merge.merge_day` restricted to the keys the day touches: the day is folded as `merge_day` folds it
(`merge._delta`), the state rows of those keys are found by a semi-join against the day's keys (broadcast), and
each key's row after the day is `merge_result.finalize` of the two, the function `merge_day` ends with. So
`merge_day(state, day)` is exactly the state's untouched rows plus `day_rows` (a test holds them to it). A day
with a truncate, or a DDL that gives existing rows a default, changes rows it never names: then every state row is
a touched row.

`merge_into` writes those rows onto a branch of both tables with Spark's `MERGE INTO` (merge-on-read: the target
is scanned for its key columns and row positions only, the replaced rows get deletion vectors, the new rows are
appended): live rows to `ods.<table>`, the keys the day deleted to `ods_state.<table>` (with the delete's
position), the keys it brought back removed from there. Nothing of the untouched state is rewritten.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date, timedelta

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sharp_dagster.cdc import ods_store
from sharp_dagster.cdc.merge import (
    BROADCAST_MAX_ROWS,
    DayEvents,
    _delta,
    _delta_stats,
    build_plan,
    conform_base,
    key_condition,
    table_events,
)
from sharp_dagster.cdc.merge_plan import MergePlan, delta_key_names
from sharp_dagster.cdc.merge_result import DELETED_COLUMN, SEQ_COLUMN
from sharp_dagster.cdc.merge_result import finalize as _finalize
from sharp_dagster.cdc.ods_versions import day_tag, ods_ref, tombstones_ref
from sharp_dagster.failpoints import failpoint
from sharp_dagster.spark.checkpoint import checkpoint
from sharp_dagster.spark.iceberg import IcebergTables


@dataclass(frozen=True)
class DayRows:
    """The rows of the keys a day touches after it (`merge_day`'s columns, checkpointed) and the merge's shape."""

    rows: DataFrame
    plan: MergePlan
    null_key: bool  # a key column holds a null: the writes match keys null-safely


@dataclass(frozen=True)
class StagedDay:
    """A day merged onto a branch: the branch's head on (`ods.<table>`, `ods_state.<table>`) and what it wrote."""

    day: str
    heads: tuple[int, int]
    changed: int  # keys the day touched (rows written to either table)


def tombstone_columns(plan: MergePlan) -> list[str]:
    """What a tombstone keeps besides its position: the key, and the shard column (truncates are scoped by it)."""
    extra = [plan.shard] if plan.shard and not plan.shard_in_key else []
    return [*plan.keys, *extra]


def day_rows(
    base: DataFrame | None,
    changes: DataFrame,
    key_columns: Sequence[str],
    *,
    shard_column: str | None = None,
    events: DayEvents | None = None,
    columns: Sequence[tuple[str, str]] | None = None,
    broadcast_max_rows: int = BROADCAST_MAX_ROWS,
) -> DayRows:
    """The row after the day of every key it touches, as `merge.merge_day(base, changes, ...)` gives it (tombstones
    included): that result is `base`'s rows of the other keys plus these."""
    events = events if events is not None else table_events(changes)
    plan = build_plan(base, changes, key_columns, columns, shard_column, events)
    delta = checkpoint(_delta(changes, plan))
    keys, null_key = _delta_stats(delta, plan)
    if base is None:
        return DayRows(checkpoint(delta.select(*_finalize(plan, False, True))), plan, null_key)
    state = conform_base(base, plan)
    if not (plan.truncates or plan.defaults):
        small = keys <= broadcast_max_rows
        day_keys = delta.select(*delta_key_names(plan))
        state = state.join(F.broadcast(day_keys) if small else day_keys, key_condition(plan), "left_semi")
        joined = state.join(delta, key_condition(plan), "right")
    else:  # the day changes rows it never names: every state row is touched
        joined = state.join(delta, key_condition(plan), "full_outer")
    return DayRows(checkpoint(joined.select(*_finalize(plan, True, None))), plan, null_key)


def merge_into(
    store: IcebergTables,
    table: str,
    day: str,
    branch: str,
    changes: DataFrame,
    key_columns: Sequence[str],
    *,
    shard_column: str | None = None,
    events: DayEvents | None = None,
    columns: Sequence[tuple[str, str]] | None = None,
) -> StagedDay:
    """Merge day `day`'s changes into the state on `branch` (cut at the previous day's tag: `ods_store.cut`) and
    write the result there. Without the tables yet (a table's first day with no bootstrap) they are created from
    the day's columns and the branch cut at their empty `main`."""
    fresh = not ods_store.exists(store, table)
    base = None if fresh else _state_before(store, table, branch, day)
    merged = day_rows(base, changes, key_columns, shard_column=shard_column, events=events, columns=columns)
    plan = merged.plan
    if fresh:
        ods_store.create_tables(store, table, plan.columns, tombstone_columns(plan))
        for ref in ods_store.both(table):
            store._commit_refs(ref, lambda t: t.manageSnapshots().createBranch(branch))
    _evolve(store, table, plan, day)
    view = f"__ods_day_{uuid.uuid4().hex}"
    merged.rows.createOrReplaceTempView(view)
    try:
        _write(store, table, branch, view, plan, merged.null_key)
    finally:
        store.spark.catalog.dropTempView(view)
    heads = tuple(ods_store.ref_snapshot(store, ref, branch) for ref in ods_store.both(table))
    return StagedDay(day, heads, merged.rows.count())


# A table property per column a day's ALTER added: the day it was added (`sharp.column-since.<column>`).
COLUMN_SINCE = "sharp.column-since."


def _state_before(store: IcebergTables, table: str, branch: str, day: str) -> DataFrame:
    """The state on `branch` as day `day` starts from it, with the columns it had then. A branch reads with the
    table's schema, which holds every column added since (a re-run of an earlier day: its later days' ALTERs were
    applied already); those are left out, so that the day that adds one adds it again, with its default for the
    rows from before it."""
    state = ods_store.state_at(store, table, branch)
    props = store._table(ods_ref(table)).properties()
    since = {
        str(k)[len(COLUMN_SINCE) :]: str(props.get(k))
        for k in props.keySet()
        if str(k).startswith(COLUMN_SINCE)
    }
    later = [c for c in state.columns if since.get(c.lower(), "") >= day]
    return state.drop(*later) if later else state


def _evolve(store: IcebergTables, table: str, plan: MergePlan, day: str) -> None:
    """The columns the day adds (its ALTER TABLE ... ADD) added to `ods.<table>`, each with the day it was added
    (`COLUMN_SINCE`); a changed type widened."""
    name = store.name(ods_ref(table))
    current = {f.name.lower(): f.dataType.simpleString() for f in store.spark.table(name).schema}
    for column, typ in plan.columns:
        if column.lower() not in current:
            store.spark.sql(f"ALTER TABLE {name} ADD COLUMN `{column}` {typ}")
            store.spark.sql(
                f"ALTER TABLE {name} SET TBLPROPERTIES ('{COLUMN_SINCE}{column.lower()}' = '{day}')"
            )
        elif current[column.lower()] != typ:
            store.spark.sql(f"ALTER TABLE {name} ALTER COLUMN `{column}` TYPE {typ}")
    store._refresh(ods_ref(table))


def _write(store: IcebergTables, table: str, branch: str, view: str, plan: MergePlan, null_key: bool) -> None:
    """Two `MERGE INTO`s on the branch: the live rows of the touched keys, and their tombstones."""
    eq = "<=>" if null_key else "="  # a plain equi-join probes a faster hash table
    on = " AND ".join(f"t.`{k}` {eq} s.`{k}`" for k in plan.keys)
    live_cols = [c for c, _ in plan.columns] + [SEQ_COLUMN]
    dead_cols = [*tombstone_columns(plan), SEQ_COLUMN]
    deleted = f"s.`{DELETED_COLUMN}`"
    ods, dead = (f"{store.name(ref)}.`branch_{branch}`" for ref in (ods_ref(table), tombstones_ref(table)))
    store.spark.sql(
        f"MERGE INTO {ods} t USING {view} s ON {on} "
        f"WHEN MATCHED AND {deleted} THEN DELETE "
        f"WHEN MATCHED THEN UPDATE SET {_assign(live_cols)} "
        f"WHEN NOT MATCHED AND NOT {deleted} THEN INSERT {_insert(live_cols)}"
    )
    store.spark.sql(
        f"MERGE INTO {dead} t USING {view} s ON {on} "
        f"WHEN MATCHED AND NOT {deleted} THEN DELETE "
        f"WHEN MATCHED THEN UPDATE SET t.`{SEQ_COLUMN}` = s.`{SEQ_COLUMN}` "
        f"WHEN NOT MATCHED AND {deleted} THEN INSERT {_insert(dead_cols)}"
    )
    for ref in ods_store.both(table):
        store._refresh(ref)


def _assign(columns: Sequence[str]) -> str:
    return ", ".join(f"t.`{c}` = s.`{c}`" for c in columns)


def _insert(columns: Sequence[str]) -> str:
    names = ", ".join(f"`{c}`" for c in columns)
    return f"({names}) VALUES ({', '.join(f's.`{c}`' for c in columns)})"


def write_state(
    store: IcebergTables,
    table: str,
    day: str,
    state: DataFrame,
    key_columns: Sequence[str],
    shard_column: str | None = None,
) -> int:
    """Publish `state` (a bootstrap snapshot from `merge.initial_state`, or a migrated day: `merge_day`'s columns)
    as day `day`, the first of the days merged after it: its live rows to `ods.<table>`, its tombstones to
    `ods_state.<table>`, both tagged `day`. A bootstrap taken again (`cdc bootstrap --force`) replaces the state on
    `main` (and `day`'s tag) when no later day is published; with later days it is refused (their states were
    merged from the old snapshot: roll the table back first). Returns the live rows written."""
    later = [d for d in ods_store.published_days(store, table) if d > day_tag(day)]
    if later:
        raise ValueError(
            f"ods.{table} has published days after {day} ({', '.join(later)}): a new starting state of {day} "
            f"would leave them merged from the old one; roll ods.{table} back to {day} first"
        )
    columns = [
        (f.name, f.dataType.simpleString())
        for f in state.schema
        if f.name not in (SEQ_COLUMN, DELETED_COLUMN)
    ]
    shard = shard_column if shard_column and shard_column not in key_columns else None
    dead_cols = [*key_columns, *([shard] if shard else [])]
    ods_store.create_tables(store, table, columns, dead_cols)
    rows = checkpoint(state)
    live = rows.where(~F.col(DELETED_COLUMN)).drop(DELETED_COLUMN)
    dead = rows.where(F.col(DELETED_COLUMN)).select(*[F.col(f"`{c}`") for c in dead_cols], SEQ_COLUMN)
    heads = []
    for ref, df in ((ods_ref(table), live), (tombstones_ref(table), dead)):
        # The whole state: a bootstrap taken again replaces what `main` held.
        df.writeTo(store.name(ref)).overwrite(F.lit(True))
        store._refresh(ref)
        heads.append(ods_store.ref_snapshot(store, ref, "main"))
    tag = day_tag(day)
    for ref, head in zip(ods_store.both(table), heads, strict=True):

        def retag(t, head=head):
            manage = t.manageSnapshots()
            return manage.replaceTag(tag, head) if t.refs().containsKey(tag) else manage.createTag(tag, head)

        store._commit_refs(ref, retag)
        store._refresh(ref)
    return live.count()


def predecessor(store: IcebergTables, table: str, day: str) -> str:
    """The published day a merge of `day` starts from: the calendar day before it, which must be tagged."""
    before = (date.fromisoformat(day_tag(day)) - timedelta(days=1)).isoformat()
    if before not in ods_store.published_days(store, table):
        raise LookupError(f"ods.{table}: no published state of {before} (its tag) to merge {day} onto")
    return before


def stage_days(
    store: IcebergTables,
    table: str,
    branch: str,
    days: Sequence[str],
    changes_of: Callable[[str], tuple[DataFrame, DayEvents | None]],
    key_columns: Sequence[str],
    shard_column: str | None = None,
) -> tuple[list[StagedDay], int | None]:
    """Merge `days` (consecutive, oldest first) one after the other on `branch`, cut at the tag of the day before
    the first: a new day, a range, or a re-run of day D with every later published day after it. `changes_of(day)`
    gives a day's changes and events. Returns the staged days and the `main` head `publish_days` fences on."""
    expected_main = ods_store.cut(store, table, branch, predecessor(store, table, days[0]))
    # The branch is cut, no day is merged onto it yet: where the fault tests kill a run mid-write.
    failpoint("mid_write")
    staged = []
    for day in days:
        changes, events = changes_of(day)
        staged.append(
            merge_into(
                store, table, day, branch, changes, key_columns, shard_column=shard_column, events=events
            )
        )
    return staged, expected_main


def publish(
    store: IcebergTables, table: str, branch: str, staged: Sequence[StagedDay], expected_main: int | None
) -> int:
    """Publish staged days: fence on `main`, move it to the branch, tag every day (`ods_store.publish_days`)."""
    return ods_store.publish_days(store, table, branch, {s.day: s.heads for s in staged}, expected_main)
