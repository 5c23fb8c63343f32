"""The merge's result row: the state's bookkeeping columns, and how a key's state row and its day's delta (the fold
of `fold.fold_per_key`) combine into the key's row after the day (`finalize`).

The state is the table's data columns plus `_binlog_seq` (the binlog position of the change that last touched the
row) and `_is_deleted` (deleted keys stay as tombstones, so that a replayed older event cannot bring them back).
"""

from __future__ import annotations

from decimal import Decimal

from pyspark.sql import Column
from pyspark.sql import functions as F

from sharp_dagster.cdc.merge.plan import MergePlan
from sharp_dagster.spark.column_cache import columns_per_jvm

SEQ_COLUMN = "_binlog_seq"
DELETED_COLUMN = "_is_deleted"  # not `_deleted`: Iceberg reserves that name for a metadata column
SEQ_TYPE = "decimal(38,0)"
STATE_COLUMNS = (SEQ_COLUMN, DELETED_COLUMN)


@columns_per_jvm
def finalize(plan: MergePlan, has_base: bool, delta_keys: bool | None) -> list[Column]:
    """The result row from the state row (absent: `has_base` False, or all nulls after an outer join) and the key's
    delta. The state's columns are named by the plan's columns; the delta's (`__k*`, `__last`, `__c*`) differ.

    Replaying the day's events newer than the state in order gives: each column the value of its latest setter
    newer than the state (or than a truncate that covers the row), else null if such a truncate cleared the row,
    else the state's value; the row is deleted if its latest newer event is a delete (or the truncate is newer than
    everything). Rows the day does not touch have a null delta and keep the state's values.
    """

    def base_col(name: str) -> Column:
        if not has_base:
            return F.lit(None)
        return F.col(f"`{name}`")

    base_seq = base_col(SEQ_COLUMN).cast(SEQ_TYPE)
    base_deleted = base_col(DELETED_COLUMN).cast("boolean")
    last = F.col("__last")
    last_seq = last["seq"]

    out: list[Column] = []
    keys = {}
    for i, name in enumerate(plan.keys):
        if delta_keys is True:
            keys[name.lower()] = F.col(f"__k{i}")
        elif delta_keys is False:
            keys[name.lower()] = base_col(name)
        else:
            keys[name.lower()] = F.coalesce(base_col(name), F.col(f"__k{i}"))

    # The row's shard: the key's, else that of its latest change newer than the state, else the state's.
    shard_value: Column | None = None
    if plan.shard:
        if plan.shard_in_key:
            shard_value = keys[plan.shard.lower()]
        else:
            newer = last_seq.isNotNull() & (base_seq.isNull() | (last_seq > base_seq))
            shard_value = F.when(newer, last["src"]).otherwise(base_col(plan.shard))

    truncate = _truncate_seq(plan, shard_value)
    if truncate is None:
        floor, cleared = base_seq, None
    else:
        cleared = truncate.isNotNull() & (base_seq.isNull() | (truncate > base_seq))
        floor = F.when(cleared, truncate).otherwise(base_seq)

    def newer_than_floor(seq: Column) -> Column:
        return seq.isNotNull() & (floor.isNull() | (seq > floor))

    def unless_cleared(kept: Column, cleared_value: Column) -> Column:
        return kept if cleared is None else F.when(cleared, cleared_value).otherwise(kept)

    for name, typ in plan.columns:
        lower = name.lower()
        if lower in keys:
            out.append(keys[lower].cast(typ).alias(name))
            continue
        if plan.shard and lower == plan.shard.lower():
            out.append(shard_value.cast(typ).alias(name))
            continue
        j = next(j for j, (c, _) in enumerate(plan.values) if c.lower() == lower)
        setter = F.col(f"__c{j}")
        kept = unless_cleared(base_col(name), F.lit(None))
        value = F.when(newer_than_floor(setter["s"]), setter["v"]).otherwise(kept)
        out.append(value.cast(typ).alias(name))

    kept_deleted = unless_cleared(F.coalesce(base_deleted, F.lit(False)), F.lit(True))
    deleted = F.when(newer_than_floor(last_seq), last["del"]).otherwise(kept_deleted)
    seqs = [base_seq, last_seq] + ([truncate] if truncate is not None else [])
    out.append(F.greatest(*seqs).cast(SEQ_TYPE).alias(SEQ_COLUMN))
    out.append(deleted.alias(DELETED_COLUMN))
    return out


def _truncate_seq(plan: MergePlan, shard_value: Column | None) -> Column | None:
    """The position of the latest truncate that covers the row, or None when the day truncated nothing."""
    if not plan.truncates:
        return None
    if None in plan.truncates or shard_value is None:
        return F.lit(Decimal(max(plan.truncates.values()))).cast(SEQ_TYPE)
    pairs: list[Column] = []
    for shard, seq in plan.truncates.items():
        pairs += [F.lit(shard), F.lit(Decimal(seq)).cast(SEQ_TYPE)]
    return F.try_element_at(F.create_map(*pairs), shard_value)
