"""The daily merge of a range of days in one plan: every day's state of an ODS table from the state before the
range and the range's changes, as row versions (`merge_range`), each day's state a filter of them (`state_on`).

A backfill of N days ran `merge.merge_day` N times, each day's state read by the next: N folds, N joins, N
checkpoints, a dozen Spark jobs per day on a small table. Here the range's changes are folded once, per key and
day, and joined once with the state before the range. The result is exactly the chain of `merge_day`s:

- Day d's merge ignores a change at or before the key's state position, which is the state's before the range
  or the latest change of an earlier day. So a change is dropped first when its position is not above every
  change of the key's earlier days (a window over the key's actions, by day); the rest fold per key and day
  with `merge_day`'s own fold (`merge.fold_columns`).
- After that, every kept change of a later day is newer than every kept change of an earlier one. The key's
  fold up to day d is then its latest day's latest event, and for each column the setter of the latest day that
  set it (`last(..., ignorenulls)` over the days so far). Its row after day d is `merge_result.finalize` of the
  state row before the range and that fold, the same function `merge_day` ends with.
- Each such row holds from its day up to the key's next day with changes (`lead`); the state row before the
  range holds up to the key's first day with changes, or through the range for a key the range never touches.

Truncates and DDL change the plan itself (which columns exist, which rows a truncate clears) from one day to
the next, so a range with any is refused here: the caller merges those days one by one.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from sharp_dagster.cdc.merge import DayEvents, build_plan, conform_base, fold_columns, key_condition
from sharp_dagster.cdc.merge_actions import actions
from sharp_dagster.cdc.merge_plan import delta_key_names
from sharp_dagster.cdc.merge_result import DELETED_COLUMN, SEQ_COLUMN
from sharp_dagster.cdc.merge_result import finalize as _finalize

VALID_FROM = "__valid_from"  # the first day a version is the key's row; null: from before the range
VALID_TO = "__valid_to"  # the first day it no longer is; null: through the range
VERSION_COLUMNS = (VALID_FROM, VALID_TO)


def merge_range(
    base: DataFrame,
    changes: DataFrame,
    key_columns: Sequence[str],
    *,
    events: DayEvents,
    shard_column: str | None = None,
    day_column: str = "dt",
) -> DataFrame:
    """Every key's row versions over the range: the state's columns as `merge.merge_day` gives them, then
    `__valid_from` and `__valid_to` (ISO days). `changes` are a range of days' changes (raw or typed, as for
    `merge_day`), each row's day in `day_column`; `base` is the state before the first of them; `events` the
    range's truncates and DDL, which must be none. `state_on(versions, day)` is the state after `day`."""
    if base is None:
        raise ValueError(
            "merge_range needs the state before the range: merge a table's first day with merge_day"
        )
    if events.truncates or events.ddl:
        raise ValueError(
            f"merge_range folds days without truncates or DDL; the range has {len(events.truncates)} truncated "
            f"table(s) and {len(events.ddl)} DDL statement(s): merge its days one by one (merge_day)"
        )
    if day_column not in changes.columns:
        raise ValueError(f"changes lack the day column {day_column!r}")
    plan = build_plan(base, changes, key_columns, None, shard_column, events)
    keys = delta_key_names(plan)
    by_key = Window.partitionBy(*keys)
    in_order = by_key.orderBy("__day")
    earlier = in_order.rangeBetween(Window.unboundedPreceding, -1)
    so_far = in_order.rowsBetween(Window.unboundedPreceding, Window.currentRow)

    events_by_key = actions(changes, plan, (day_column,)).withColumn(
        "__day", F.unix_date(F.to_date(day_column))
    )
    prior = F.max("seq").over(earlier)
    kept = events_by_key.withColumn("__prior", prior).where(
        F.col("__prior").isNull() | (F.col("seq") > F.col("__prior"))
    )
    daily = kept.groupBy(*keys, "__day", day_column).agg(*fold_columns(plan))
    setters = [name for name in daily.columns if name.startswith("__c")]
    cumulative = daily.select(
        *keys,
        F.col(day_column).alias(VALID_FROM),
        F.lead(day_column).over(in_order).alias(VALID_TO),
        (F.row_number().over(in_order) == 1).alias("__first"),
        "__last",
        *[F.last(name, ignorenulls=True).over(so_far).alias(name) for name in setters],
    )

    state = conform_base(base, plan).withColumn("__in_base", F.lit(True))
    joined = state.join(cumulative, key_condition(plan), "full_outer")
    changed = joined.where(F.col("__last").isNotNull()).select(*_finalize(plan, True, None), *VERSION_COLUMNS)
    names = [F.col(f"`{name}`") for name, _ in plan.columns]
    untouched = F.col("__last").isNull()
    before = joined.where(F.col("__in_base") & (untouched | F.col("__first"))).select(
        *names,
        SEQ_COLUMN,
        DELETED_COLUMN,
        F.lit(None).cast("string").alias(VALID_FROM),
        F.when(~untouched, F.col(VALID_FROM)).alias(VALID_TO),
    )
    return changed.unionByName(before)


def state_on(versions: DataFrame, day: str) -> DataFrame:
    """The state after `day` (a day of the range): each key's version that holds on it."""
    starts = F.col(VALID_FROM).isNull() | (F.col(VALID_FROM) <= F.lit(day))
    lasts = F.col(VALID_TO).isNull() | (F.lit(day) < F.col(VALID_TO))
    return versions.where(starts & lasts).drop(*VERSION_COLUMNS)
