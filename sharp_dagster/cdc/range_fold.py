"""An ODS table's range of days merged in one plan, when it can be: the batch's days of changes read once and folded
at once (`merge_range`), each day's state then a filter of the result (`merge_range.state_on`).

A range batch of an ODS table's days merged day after day ran a dozen small Spark jobs per day (read, count,
fold, checkpoint, join, checkpoint). `fold_range` runs them once for the batch when the range can be folded at
once: consecutive days, each with all 24 done markers; the state before the first day on disk; and the changes
of every day from one source with no truncate or DDL (`change_source.range_changes`). Otherwise it returns None,
and the days are merged one by one (`merge_day`), which says which day is not ready or which images are off,
exactly as a sequential run would.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, timedelta

from pyspark.sql import DataFrame

from sharp_dagster.cdc.change_source import range_changes
from sharp_dagster.cdc.merge import DayEvents
from sharp_dagster.cdc.merge_range import merge_range
from sharp_dagster.spark.checkpoint import checkpoint
from sharp_dagster.spark.iceberg import IcebergTables
from sharp_dagster.spark.tables import MissingPartitionError, TableRef


def fold_range(
    store: IcebergTables,
    raw: TableRef,
    state: TableRef,
    database: str,
    table: str,
    key_columns: Sequence[str],
    shard_column: str | None,
    days: Sequence[str],
) -> tuple[DataFrame, dict[str, int]] | None:
    """The row versions of `database.table` over `days` (`merge_range`, checkpointed) from the state partition
    of the day before them, and each day's change count (in the order of `days`); None when the range cannot be
    folded at once (the caller merges the days one by one)."""
    # Here, not at the top: done_markers reads the landing's layout, which loads the Kafka client, and this module
    # is imported when the code location loads (the definitions' start-up time), where no Kafka client is needed.
    from sharp_dagster.cdc.done_markers import day_complete

    days = list(days)
    first = date.fromisoformat(days[0])
    if days != [(first + timedelta(days=i)).isoformat() for i in range(len(days))]:
        return None
    if not all(day_complete(store.warehouse_dir, database, day, spark=store.spark) for day in days):
        return None
    if not store.exists(raw):
        return None
    try:
        base = store.read_partitions(state, [{"dt": (first - timedelta(days=1)).isoformat()}]).drop("dt")
    except MissingPartitionError:
        return None
    read = range_changes(store, raw, database, table, days)
    if read is None:
        return None
    changes, counts = read
    versions = merge_range(base, changes, list(key_columns), shard_column=shard_column, events=DayEvents())
    return checkpoint(versions), counts
