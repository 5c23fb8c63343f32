"""An ODS merge's range batch in one plan: the batch's days of changes read once and merged at once
(`cdc.merge_range`), each day's state a filter of the result.

A batch of an ODS table's days (`lifecycle_range`) merged day after day ran a dozen small Spark jobs per day (read,
count, fold, checkpoint, join, checkpoint). `merged_range` runs them once for the batch, at its first day, when the
range can be folded at once: consecutive days, each with all 24 done markers; the state before the first day on
disk; no truncate or DDL in the range; and the changes of every day from the same source, the landing's typed
images when they hold each day's every change, each value of its type (else the raw binlog rows, when the landing
wrote no images table). Otherwise it returns None, and the days are merged one by one (`merge_day`), which says
which day is not ready or which images are off, exactly as a sequential run would.
"""

from __future__ import annotations

import logging
from datetime import date, timedelta

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sharp_dagster.cdc.merge import TABLE_EVENTS_AGGREGATE, DayEvents, day_events
from sharp_dagster.spark.checkpoint import checkpoint
from sharp_dagster.spark.tables import MissingPartitionError, TableRef
from sharp_dagster.warehouse.cdc_layout import OdsTable

log = logging.getLogger("sharp_dagster.cdc_assets")


def merged_range(run, t: OdsTable, state: TableRef) -> tuple[DataFrame, dict[str, int]] | None:
    """The row versions of the run's batch (`merge_range`, checkpointed) and each day's change count; computed at
    the batch's first day, shared by the others. None outside a batch or when its range cannot be folded at once."""
    batch = run.batch
    if batch is None or len(batch.keys) < 2:
        return None
    return batch.shared(("ods_range", t.name), lambda: _merge(run.tables, t, state, batch.keys))


def _merge(store, t: OdsTable, state: TableRef, days: list[str]) -> tuple[DataFrame, dict[str, int]] | None:
    from sharp_dagster.cdc.done_markers import day_complete
    from sharp_dagster.cdc.landing import raw_table_ref
    from sharp_dagster.cdc.merge_range import merge_range

    first = date.fromisoformat(days[0])
    if days != [(first + timedelta(days=i)).isoformat() for i in range(len(days))]:
        return None
    if not all(day_complete(store.warehouse_dir, t.database, day, spark=store.spark) for day in days):
        return None
    raw = raw_table_ref(t.database)
    if not store.exists(raw):
        return None
    try:
        base = store.read_partitions(state, [{"dt": (first - timedelta(days=1)).isoformat()}]).drop("dt")
    except MissingPartitionError:
        return None
    read = range_changes(store, raw, t, days)
    if read is None:
        return None
    changes, counts = read
    versions = merge_range(base, changes, t.key_columns(), shard_column=t.shard_column, events=DayEvents())
    return checkpoint(versions), counts


def range_changes(
    store, raw: TableRef, t: OdsTable, days: list[str]
) -> tuple[DataFrame, dict[str, int]] | None:
    """The changes of `t` on `days` (each row's day in `dt`), checkpointed, and each day's count, from the source
    `cdc_assets.day_changes` would take for every one of those days; None when that differs between days, when
    the landing's typed images disagree with the raw binlog table, or when a day has a truncate or DDL."""
    from sharp_dagster.cdc.image_tables import read_typed_images

    spark = store.spark
    typed = read_typed_images(store, t.database, t.name, days)
    # The range's hourly files (24 a day) make hundreds of read tasks of a few rows each: held in as many
    # partitions as the session has cores instead, the count and the merge run a task per core, not per file.
    cores = max(1, spark.sparkContext.defaultParallelism)
    if typed is None:
        raw_rows = spark.table(store.name(raw)).where(
            (F.col("table_name") == t.name) & F.col("dt").isin(*days)
        )
        rows = checkpoint(raw_rows.coalesce(cores))
        stats = {r["dt"]: r for r in rows.groupBy("dt").agg(*_stats(False)).collect()}
    else:
        rows = checkpoint(typed.coalesce(cores))
        stats = {r["dt"]: r for r in rows.groupBy("dt").agg(*_stats(True)).collect()}
        raw_counts = raw_counts_by_day(store, raw, t.name, days)
        off = [
            d
            for d in days
            if _count(stats, d) != raw_counts.get(d, 0) or (d in stats and stats[d]["misfits"])
        ]
        if off:
            log.info("ods/%s: typed images differ from the raw binlog on %s: merging day by day", t.name, off)
            return None
    events = [day_events(r["events"]) for r in stats.values()]
    if any(e.truncates or e.ddl for e in events):
        return None
    return rows, {day: _count(stats, day) for day in days}


def raw_counts_by_day(store, raw: TableRef, table: str, days: list[str]) -> dict[str, int]:
    """The raw binlog rows of `table` on each of `days`, from the raw table's partition metadata (no data read:
    the landing only appends whole files, so the data files' record counts are its rows)."""
    cols = raw.partition_cols
    at_table, at_day = cols.index("table_name"), cols.index("dt")
    wanted = set(days)
    out = dict.fromkeys(days, 0)
    for values, rows in store.partition_counts(raw).items():
        if values[at_table] == table and values[at_day] in wanted:
            out[values[at_day]] += rows
    return out


def _stats(typed: bool) -> list:
    counts = [F.count(F.lit(1)).alias("n")]
    if typed:
        counts.append(F.expr("count_if(cast_errors IS NOT NULL)").alias("misfits"))
    return [*counts, F.expr(TABLE_EVENTS_AGGREGATE).alias("events")]


def _count(stats: dict, day: str) -> int:
    return int(stats[day]["n"]) if day in stats else 0
