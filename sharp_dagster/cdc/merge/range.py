"""A range of days merged at once: for every key the range touches, its row after each day that touched it
(`range_rows`), from the state before the range and the range's changes, in one plan.

Merging N days one after the other folds, looks at the state and finalizes N times: a dozen small Spark jobs per
day on a small table. Here the range's changes are folded once, per key and day, and the state is looked at
once for the range's keys. The rows are exactly the chain of `fold.merge_day`s:

- Day d's merge ignores a change at or before the key's state position, which is the state's before the range
  or the latest change of an earlier day. So a change is dropped first when its position is not above every
  change of the key's earlier days (a window over the key's actions, by day); the rest fold per key and day
  with `merge_day`'s own fold (`fold.fold_columns`).
- After that, every kept change of a later day is newer than every kept change of an earlier one. The key's
  fold up to day d is then its latest day's latest event, and for each column the setter of the latest day that
  set it (`last(..., ignorenulls)` over the days so far). Its row after day d is `result.finalize` of the state
  row before the range and that fold, the same function `merge_day` ends with.

Each row carries its day (`DAY_COLUMN`) and what held the key just before it (`BEFORE_COLUMN`): the state row
before the range for the key's first day in it, else the key's row after its previous day in it. That is what
the day's writes need to know of the tables (`ods/range_stage.py`).

Truncates and DDL change the plan itself (which columns exist, which rows a truncate clears) from one day to the
next, so a range with any is refused here: the caller merges those days one by one. Nothing here imports Dagster.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from sharp_dagster.cdc.merge.actions import actions
from sharp_dagster.cdc.merge.fold import DayEvents, build_plan, conform_base, fold_columns, key_condition
from sharp_dagster.cdc.merge.plan import MergePlan, delta_key_names
from sharp_dagster.cdc.merge.result import DELETED_COLUMN
from sharp_dagster.cdc.merge.result import finalize as _finalize

DAY_COLUMN = "__day"  # the day (ISO) after which a row of `range_rows` is its key's row
# What held the key just before that day: its row's `_is_deleted` (null: no row of the key; false: a live row,
# so `ods.<table>` holds it; true: a tombstone, so `ods_state.<table>` holds it).
BEFORE_COLUMN = "__before"


def range_mergeable(events: Sequence[DayEvents | None]) -> bool:
    """Can days with these events be merged at once? Not when one has a truncate or a DDL statement (they change
    the plan from one day to the next), nor when a day's events are unknown."""
    return all(e is not None and not e.truncates and not e.ddl for e in events)


def range_rows(
    base: DataFrame,
    changes: DataFrame,
    key_columns: Sequence[str],
    *,
    events: DayEvents,
    shard_column: str | None = None,
    day_column: str = "dt",
) -> tuple[DataFrame, MergePlan]:
    """The row of every key the range touches after each day that touched it (`merge_day`'s columns, tombstones
    included), then `DAY_COLUMN` and `BEFORE_COLUMN`; and the merge's plan. `changes` are the range's changes (raw
    or typed, as for `merge_day`), each row's day in `day_column`; `base` the state before the first day;
    `events` the range's (no truncate, no DDL: `range_mergeable`). The state after day d is `base`'s rows of the
    keys not touched up to d, plus each touched key's row of its latest day up to d."""
    if base is None:
        raise ValueError("range_rows needs the state before the range: merge a table's first day alone")
    if not range_mergeable([events]):
        raise ValueError(
            f"range_rows folds days without truncates or DDL; the range has {len(events.truncates)} truncated "
            f"table(s) and {len(events.ddl)} DDL statement(s): merge its days one by one"
        )
    if day_column not in changes.columns:
        raise ValueError(f"changes lack the day column {day_column!r}")
    plan = build_plan(base, changes, key_columns, None, shard_column, events)
    keys = delta_key_names(plan)
    in_order = Window.partitionBy(*keys).orderBy(DAY_COLUMN)
    # The key's earlier days: a range frame needs a number to order by (the day's number).
    earlier = Window.partitionBy(*keys).orderBy("__n").rangeBetween(Window.unboundedPreceding, -1)
    so_far = in_order.rowsBetween(Window.unboundedPreceding, Window.currentRow)

    events_by_key = actions(changes, plan, (day_column,)).select(
        "*", F.col(day_column).alias(DAY_COLUMN), F.unix_date(F.to_date(day_column)).alias("__n")
    )
    prior = F.max("seq").over(earlier)
    kept = events_by_key.withColumn("__prior", prior).where(
        F.col("__prior").isNull() | (F.col("seq") > F.col("__prior"))
    )
    daily = kept.groupBy(*keys, DAY_COLUMN).agg(*fold_columns(plan))
    setters = [name for name in daily.columns if name.startswith("__c")]
    cumulative = daily.select(
        *keys,
        DAY_COLUMN,
        (F.row_number().over(in_order) == 1).alias("__first"),
        "__last",
        *[F.last(name, ignorenulls=True).over(so_far).alias(name) for name in setters],
    )
    # The state's rows of the range's keys (whole: a partial image or a replayed event keeps state values), the
    # keys broadcast past one scan of the state; then each key-day's fold joined with its key's state row.
    touched = conform_base(base, plan).join(
        F.broadcast(cumulative.where("__first").select(*keys)), key_condition(plan), "left_semi"
    )
    joined = cumulative.join(F.broadcast(touched), key_condition(plan), "left")
    rows = joined.select(
        *_finalize(plan, True, None),
        DAY_COLUMN,
        "__first",
        F.col(DELETED_COLUMN).alias("__state"),  # the state row's flag (null: no state row of the key)
    )
    by_key = Window.partitionBy(*[F.col(f"`{k}`") for k in plan.keys]).orderBy(DAY_COLUMN)
    before = F.when(F.col("__first"), F.col("__state")).otherwise(F.lag(DELETED_COLUMN).over(by_key))
    kept_columns = [c for c in rows.columns if c not in ("__first", "__state")]
    return rows.select(*kept_columns, before.alias(BEFORE_COLUMN)), plan
