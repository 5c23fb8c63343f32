"""The daily binlog merge: fold one day of binlog changes into the state of an ODS table, on Spark.

The day's changes come either typed (`images.typed_images`: the landing wrote each change's images as typed
structs, so the merge parses no JSON) or raw (the raw binlog table's JSON images, typed here by the same function).
The state is the table's data columns plus `_binlog_seq` (the binlog position of the change that last touched the
row) and `_is_deleted` (deleted keys stay as tombstones, so that a replayed older event cannot bring them back); the
ODS table publishes the live rows (`published`). Everything that decides the result lives in this module, in
`merge_plan` (the merge's shape, `MergePlan`), `merge_actions` (one row per key and event, what it sets) and
`merge_result` (how a key's state row and its folded day combine into its new row):

- Changes are ordered by binlog position (`binlog_seq`), never by timestamp or Kafka offset; ties (which one binlog
  cannot produce) break on a hash of `event_uid` so that the result is deterministic.
- An event at or before the key's state position is ignored, so replays and re-runs change nothing.
- A full image (insert, snapshot read, delete, the new key of a key-changing update, a truncate) sets every column
  of the row; a plain update is a *partial* image that sets only the columns it carries. The day folds per key
  into: its latest event (position, delete or not), and for each column its latest *setter* (value, position).
  Combined with the state row this gives exactly the sequential replay of the events newer than the state: a
  column takes its latest setter's value when that is newer than the state (and than a truncate covering the row),
  else null when such a truncate cleared the row, else the state's value; the row is deleted when its latest
  newer event is a delete.
- Duplicates (same `event_uid`) are the same binlog event with the same position and images: in the fold they
  tie with themselves, so they need no separate de-duplication shuffle.

Plan: the day's changes are typed once (read from the landing's typed images, or `images.typed_images` of the
raw JSON) and folded into the delta, one row per key (one shuffle of the changes, by key). The delta is small next
to the state, so it is broadcast and the state streams through a broadcast hash join without ever being shuffled;
keys new to the state are the delta minus the state's keys (a key-only scan of the state, semi-joined against the broadcast delta keys).
`strategy="shuffle"` (or "auto" with a delta above `broadcast_max_rows`) full-outer-joins instead.
The plan's Columns (the projections of the fold, its aggregates, the join condition, the result row) depend only on
the plan's shape (`merge_plan.MergePlan`: columns, key, shard, defaults, truncates) and the images' fields, and are built once per
shape (`spark.column_cache`): building a Column is a JVM round trip per call, about 2,000 per merge before.

A key column named `source_table` (`shards.PHYSICAL_TABLE_COLUMN`) always takes the change's physical table, with
or without `shard_column`: read from the row images it would be null everywhere and collapse the shards' equal ids.
Without a base and without `columns` (a table's first day), the columns come from the day's CREATE TABLE, its
row images (types as their JSON values show them: a string stays a string) and its ALTER TABLE ... ADD.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Literal

from pyspark.sql import Column, DataFrame, Row
from pyspark.sql import functions as F

from sharp_dagster.cdc.change import images
from sharp_dagster.cdc.change.ddl_changes import DdlPolicy, UnfollowableDdl, evolve_schema, is_drop_table
from sharp_dagster.cdc.change.schema_evolution import parse_added_columns
from sharp_dagster.cdc.merge.actions import actions
from sharp_dagster.cdc.merge.plan import MergePlan, default_value, delta_key_names
from sharp_dagster.cdc.merge.result import DELETED_COLUMN, SEQ_COLUMN, SEQ_TYPE, STATE_COLUMNS
from sharp_dagster.cdc.merge.result import finalize as _finalize
from sharp_dagster.cdc.source.shards import PHYSICAL_TABLE_COLUMN
from sharp_dagster.spark.checkpoint import checkpoint
from sharp_dagster.spark.column_cache import columns_per_jvm

Strategy = Literal["auto", "broadcast", "shuffle"]
# Keys of a day's delta above which "auto" stops broadcasting it: the driver builds the hash table of the folded
# rows. On 2 cores (bench/bench_merge.py, 2026-11-25, two runs) broadcasting 500,000 keys beat the shuffle (lower
# bounds 1.30-1.46x vs 1.44-1.63x a copy of 5 M state rows); at 2,000,000 keys (20 M state rows) the shuffle was as fast or faster
# (82-87 s against 88-104 s) and spares the driver a hash table of 2 M rows.
BROADCAST_MAX_ROWS = 1_000_000

_RAW_CHANGE_COLUMNS = {*images.META_COLUMNS, "before_json", "after_json"} - {"event_ts_ms"}
_TYPED_CHANGE_COLUMNS = {*images.META_COLUMNS, *images.IMAGE_COLUMNS} - {"event_ts_ms"}


@dataclass(frozen=True)
class DayEvents:
    """The table-level events of a day (few; held on the driver): truncates and DDL statements, and the source's
    policy for the DDL (`ddl_changes.DdlPolicy`; the asset sets it from the YAML). A DROP TABLE is a truncate at
    its position too: the rows the source no longer has leave the ODS."""

    # shard (the physical `source_table`), or None for the whole table -> position of its latest truncate
    truncates: dict[str | None, int] = field(default_factory=dict)
    ddl: tuple[str, ...] = ()
    policy: DdlPolicy = DdlPolicy()
    table: str = field(default="", compare=False)  # the physical table of the DDL (named in a refusal)
    # the day's change rows when the caller counted them (`change_source`): a bound of its keys
    rows: int | None = field(default=None, compare=False)


def merge_key(
    pk_names: Sequence[str], *, shard_column: str | None = None, business_key: Sequence[str] | None = None
) -> list[str]:
    """The key the merge folds on: a configured business key, else the primary key plus the shard column.

    >>> merge_key(["id"], shard_column="source_table")
    ['id', 'source_table']
    """
    if business_key:
        return list(business_key)
    key = list(pk_names)
    if shard_column and shard_column.lower() not in {k.lower() for k in key}:
        key.append(shard_column)
    if not key:
        raise ValueError(
            "the table has no primary key and no business key is configured: cannot merge its binlog"
        )
    return key


def initial_state(snapshot: DataFrame, snapshot_seq: int | None) -> DataFrame:
    """A state from a snapshot of the source table, stamped with the binlog position it was taken at.

    With `snapshot_seq` None every change of the binlog applies to the snapshot rows.
    """
    seq = F.lit(Decimal(snapshot_seq) if snapshot_seq is not None else None).cast(SEQ_TYPE)
    data = [F.col(f"`{c}`") for c in snapshot.columns if c not in STATE_COLUMNS]
    return snapshot.select(*data, seq.alias(SEQ_COLUMN), F.lit(False).alias(DELETED_COLUMN))


def published(state: DataFrame) -> DataFrame:
    """The rows the ODS table publishes: live rows, without the merge's bookkeeping columns."""
    return state.where(~F.col(DELETED_COLUMN)).drop(*STATE_COLUMNS)


# The day's table-level events as one aggregate (an array of structs), for `day_events`: a caller that scans the
# day's changes anyway (to count them) adds it to that scan instead of running `table_events`' job.
TABLE_EVENTS_AGGREGATE = (
    "collect_list(named_struct('op', op, 'seq', cast(binlog_seq AS decimal(38,0)), 'event_uid', event_uid, "
    "'source_table', source_table, 'ddl_sql', ddl_sql)) FILTER (WHERE op IN ('t', 'ddl'))"
)


def table_events(changes: DataFrame) -> DayEvents:
    """Collect the day's truncates and DDL statements (one small Spark job over the changes)."""
    return day_events(changes.selectExpr(TABLE_EVENTS_AGGREGATE).first()[0])


def day_events(rows: Sequence[Row], count: int | None = None) -> DayEvents:
    """The day's truncates and DDL statements from its rows of `TABLE_EVENTS_AGGREGATE`; `count`: the day's change
    rows when the caller counted them (`DayEvents.rows`)."""
    unique = {row.event_uid: row for row in rows}  # a re-delivered DDL is one statement
    truncates: dict[str | None, int] = {}
    ddl = []
    table = ""
    for row in sorted(unique.values(), key=lambda r: (int(r.seq), r.event_uid or "")):
        if row.op == "t" or (row.ddl_sql and is_drop_table(row.ddl_sql)):
            truncates[row.source_table] = max(truncates.get(row.source_table, 0), int(row.seq))
        if row.op != "t" and row.ddl_sql:
            ddl.append(row.ddl_sql)
            table = table or row.source_table or ""
    return DayEvents(truncates, tuple(ddl), table=table, rows=count)


def latest_changes(
    changes: DataFrame,
    key_columns: Sequence[str],
    *,
    columns: Sequence[tuple[str, str]],
    shard_column: str | None = None,
    events: DayEvents | None = None,
) -> DataFrame:
    """The day's delta: the final row of every key the day touched (tombstones for keys it deleted).

    It is the merge of the day into an empty state: columns that no change of the day carried are null, and a
    truncate only shows on the keys of the day.
    """
    plan = build_plan(None, changes, key_columns, columns, shard_column, events)
    delta = fold_per_key(changes, plan)
    return delta.select(*_finalize(plan, False, True))


def merge_day(
    base: DataFrame | None,
    changes: DataFrame,
    key_columns: Sequence[str],
    *,
    columns: Sequence[tuple[str, str]] | None = None,
    shard_column: str | None = None,
    strategy: Strategy = "auto",
    broadcast_max_rows: int = BROADCAST_MAX_ROWS,
    events: DayEvents | None = None,
) -> DataFrame:
    """The new state: `base` (the previous state, a snapshot from `initial_state`, or None) with `changes` applied.

    `changes` holds the raw binlog rows of one logical table (`binlog_schema.RAW_BINLOG_COLUMNS`). The result has
    the data columns of `base` (cast to `columns` where given) plus the columns that `columns` or the day's
    `ALTER TABLE ... ADD COLUMN` add, then `_binlog_seq` and `_is_deleted`. With neither `base` nor `columns` (a
    table's first day) the columns are the day's: its CREATE TABLE, its row images (typed by their JSON values;
    Canal's all-strings images give string columns) and its ALTERs; a day with none of them is an error.
    `shard_column` names the column holding the physical table (`source_table`) of a sharded table: it scopes
    truncates and belongs in `key_columns` (see `merge_key`) unless a business key is unique across shards. A key
    column or a `base` column named `source_table` is the physical table even when `shard_column` is not passed.

    `strategy`: "broadcast" streams the state past the broadcast delta (the state is never shuffled), "shuffle"
    full-outer-joins them, "auto" broadcasts unless the delta has more than `broadcast_max_rows` keys. The day is
    folded eagerly (a few small Spark jobs run here); the state is read when the result is. `events` skips the
    small job that collects the day's truncates and DDL when the caller already has them.
    """
    if strategy not in ("auto", "broadcast", "shuffle"):
        raise ValueError(f"unknown merge strategy {strategy!r}: use 'auto', 'broadcast' or 'shuffle'")
    plan = build_plan(base, changes, key_columns, columns, shard_column, events)
    delta = fold_per_key(changes, plan)
    if base is None:
        return delta.select(*_finalize(plan, False, True))
    state = conform_base(base, plan)
    if strategy != "shuffle":
        # Materialized once: the broadcast plan reads it three times (state rows, state keys, new keys).
        delta = checkpoint(delta)
        keys, has_null_key = _delta_stats(delta, plan)
        if strategy == "auto" and keys > broadcast_max_rows:
            strategy = "shuffle"
    if strategy == "shuffle":
        joined = state.join(delta, key_condition(plan), "full_outer")
        return joined.select(*_finalize(plan, True, None))
    # A plain equi-join on a single long key probes a much faster hash table than a null-safe one; it is the
    # same join when the day has no null key (state rows with a null key then match nothing either way).
    null_safe = has_null_key
    kept = state.join(F.broadcast(delta), key_condition(plan, null_safe), "left")
    state_keys = state.select(*[F.col(f"`{k}`") for k in plan.keys])
    delta_keys = delta.select(*delta_key_names(plan))
    matched = state_keys.join(F.broadcast(delta_keys), key_condition(plan, null_safe), "left_semi")
    new = delta.join(F.broadcast(matched), key_condition(plan, null_safe), "left_anti")
    return kept.select(*_finalize(plan, True, False)).unionByName(new.select(*_finalize(plan, False, True)))


# ----------------------------------------------------------------------------------------------------------------
# internals


def build_plan(
    base: DataFrame | None,
    changes: DataFrame,
    key_columns: Sequence[str],
    columns: Sequence[tuple[str, str]] | None,
    shard_column: str | None,
    events: DayEvents | None,
) -> MergePlan:
    typed = images.is_typed(changes)
    missing = sorted((_TYPED_CHANGE_COLUMNS if typed else _RAW_CHANGE_COLUMNS) - set(changes.columns))
    if missing:
        expected = (
            "typed images (images.typed_images)" if typed else "raw binlog columns (RAW_BINLOG_COLUMNS)"
        )
        raise ValueError(f"changes lack the columns {missing} of {expected}")
    if not key_columns:
        raise ValueError("merge needs key columns (see merge_key)")
    shard_column = _physical_table_column(key_columns, shard_column)
    if shard_column is None and base is not None:
        # A sharded table's state: else a business key unique across shards leaves the column NULL (no image has it).
        shard_column = next((c for c in base.columns if c.lower() == PHYSICAL_TABLE_COLUMN), None)
    events = events if events is not None else table_events(changes)
    inferred = base is None and columns is None
    if inferred:
        columns = _day_columns(changes, events, typed)
    base_columns: list[tuple[str, str]] = []
    if base is not None:
        if SEQ_COLUMN not in base.columns:
            raise ValueError(
                f"base has no {SEQ_COLUMN} column: build it with initial_state(snapshot, binlog_seq)"
            )
        base_columns = [
            (f.name, f.dataType.simpleString()) for f in base.schema if f.name not in STATE_COLUMNS
        ]
    target = list(columns or [])
    known = {c.lower() for c, _ in target}
    target += [(c, t) for c, t in base_columns if c.lower() not in known]
    if shard_column and shard_column.lower() not in {c.lower() for c, _ in target}:
        if base is not None:
            raise ValueError(f"base lacks the shard column {shard_column!r}")
        target.append((shard_column, "string"))
    evolution = evolve_schema(target, events.ddl, events.policy, table=events.table)
    target, defaults = evolution.columns, evolution.defaults
    renamed_keys = [
        old for _, old in evolution.renames.items() if old.lower() in {k.lower() for k in key_columns}
    ]
    if renamed_keys:
        raise UnfollowableDdl(
            f"table {events.table}: the day's DDL renames the key column(s) {renamed_keys}: the merge cannot "
            "follow a key rename; see README 'When the source changes'"
        )
    names = {c.lower() for c, _ in target}
    unknown = [k for k in key_columns if k.lower() not in names]
    if unknown and inferred:
        raise ValueError(
            f"merge into no base without `columns`: the day's row images and DDL give no key columns {unknown} "
            f"(columns found: {[c for c, _ in target]}); pass the table's `columns`"
        )
    if unknown:
        raise ValueError(f"key columns {unknown} are not columns of the table {[c for c, _ in target]}")
    truncates = dict(events.truncates)
    if not shard_column and truncates:
        # Not sharded: a truncate of the (one) physical table truncates the whole logical table.
        truncates = {None: max(truncates.values())}
    return MergePlan(
        target,
        defaults,
        list(key_columns),
        shard_column,
        truncates,
        tuple(evolution.renames.items()),
        tuple(evolution.cleared),
        tuple(evolution.dropped),
    )


def _physical_table_column(key_columns: Sequence[str], shard_column: str | None) -> str | None:
    """The column that holds the physical table: `shard_column`, else a key column named `source_table`."""
    named = next((k for k in key_columns if k.lower() == PHYSICAL_TABLE_COLUMN), None)
    if shard_column is None:
        return named
    if named is not None and shard_column.lower() != PHYSICAL_TABLE_COLUMN:
        raise ValueError(
            f"key column {named!r} holds the physical table, but shard_column is {shard_column!r}: "
            "use one column for the physical table"
        )
    return shard_column


def _day_columns(changes: DataFrame, events: DayEvents, typed: bool) -> list[tuple[str, str]]:
    """A first day's columns without a base or `columns`: its CREATE TABLE's, then those only its images carry
    (the typed images' fields, or `images.image_columns` over the JSON ones: one Spark job).

    Columns an ALTER of the day adds are left to `ddl_changes.evolve_schema`, which knows their type and the default that
    rows from before the ALTER take.
    """
    if typed:
        created = images.image_columns_of_ddl(events.ddl)
        known = {c.lower() for c, _ in created}
        found = created + [(c, t) for c, t in images.image_fields(changes) if c.lower() not in known]
    else:
        found = images.image_columns(changes, events.ddl)
    added = {a.name.lower() for statement in events.ddl for a in parse_added_columns(statement)}
    return [(c, t) for c, t in found if c.lower() not in added]


def conform_base(base: DataFrame, plan: MergePlan) -> DataFrame:
    return base.select(*_conform_columns(plan, tuple(base.columns)))


@columns_per_jvm
def _conform_columns(plan: MergePlan, base_columns: tuple[str, ...]) -> list[Column]:
    """The base's columns as the plan's: cast to their types, with defaults for the columns it lacks."""
    present = {c.lower(): c for c in base_columns}
    cols = []
    for name, typ in plan.columns:
        held = present.get(name.lower()) or present.get((plan.old_name(name) or "").lower())
        if held is not None and not plan.is_cleared(name):
            cols.append(F.col(f"`{held}`").cast(typ).alias(name))
        else:
            cols.append(default_value(plan, name, typ).alias(name))
    deleted = (
        F.coalesce(F.col(DELETED_COLUMN), F.lit(False)) if DELETED_COLUMN in base_columns else F.lit(False)
    )
    return [*cols, F.col(SEQ_COLUMN).cast(SEQ_TYPE).alias(SEQ_COLUMN), deleted.alias(DELETED_COLUMN)]


def fold_per_key(changes: DataFrame, plan: MergePlan) -> DataFrame:
    """Fold the day per key: its latest event, and for each column the latest event that set it.

    A full image sets every column and a partial update the columns it carries, so the latest setter of a column
    holds its value after the day. One shuffle by key; partitioning by key before grouping lets one sort serve both
    the partial and the final (sort-based: the buffers hold strings) aggregation.
    """
    keys = delta_key_names(plan)
    return actions(changes, plan).repartition(*keys).groupBy(*keys).agg(*fold_columns(plan))


@columns_per_jvm
def fold_columns(plan: MergePlan) -> list[Column]:
    """The aggregates of `fold_per_key`: the key's latest event, and each column's latest setter (value, position)."""
    order = F.struct("hi", "lo", "uid")
    last = [F.col("seq").alias("seq"), F.col("del").alias("del")]
    if plan.shard and not plan.shard_in_key:
        last.append(F.col("src").alias("src"))
    aggs = [F.max_by(F.struct(*last), order).alias("__last")]
    for j in range(len(plan.values)):
        setter = F.struct(F.col(f"v{j}").alias("v"), F.col("seq").alias("s"))
        aggs.append(F.max_by(setter, F.when(F.col(f"w{j}"), order)).alias(f"__c{j}"))
    return aggs


@columns_per_jvm
def key_condition(plan: MergePlan, null_safe: bool = True) -> Column:
    """The join of a state-side frame (its key columns by name) with a delta-side one (`__k0`, `__k1`, ...)."""
    condition = None
    for i, name in enumerate(plan.keys):
        # Null-safe by default: a business key may hold nulls, and a null key must still find its state row.
        left_col, delta_col = F.col(f"`{name}`"), F.col(f"__k{i}")
        term = left_col.eqNullSafe(delta_col) if null_safe else left_col == delta_col
        condition = term if condition is None else condition & term
    return condition


def _delta_stats(delta: DataFrame, plan: MergePlan) -> tuple[int, bool]:
    """The number of keys in the delta and whether one of them holds a null."""
    return key_stats(delta.agg(*stats_columns(plan)).first())


def key_stats(row: Row) -> tuple[int, bool]:
    """`stats_columns`' answer read from the row of an aggregation that holds them: (keys, a null key)."""
    return int(row["n"]), bool(row["null_key"])


@columns_per_jvm
def stats_columns(plan: MergePlan) -> list[Column]:
    any_null = None
    for name in delta_key_names(plan):
        term = F.col(name).isNull()
        any_null = term if any_null is None else any_null | term
    return [F.count(F.lit(1)).alias("n"), F.max(any_null).alias("null_key")]
