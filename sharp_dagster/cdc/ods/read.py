"""Reading published ODS days (`ods_versions`: day D of `ods.<table>` is its tag 'D'): which days a table has and
how many live rows each holds (from the metadata, no data read), the check that the days a run needs exist, and
their rows as one DataFrame.

A day with no tag was never published, was rolled back (`ods_store.rollback_to_day` drops the later tags), or
was expired by the upkeep's retention (`ods_upkeep`): in every case a reader of that day must fail, naming the
table and the day, the way a missing partition of a `dt` table does (`MissingPartitionError`).

Nothing here imports Dagster.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sharp_dagster.cdc.ods.versions import day_tag, is_day_tag, ods_ref
from sharp_dagster.spark import refs
from sharp_dagster.spark.iceberg import IcebergTables
from sharp_dagster.spark.tables import MissingPartitionError
from sharp_dagster.spark.wap import sharp_properties

DAY_COLUMN = "dt"  # the column `read_days` names each row's day by, as the `dt` tables' partition column


def day_label(table: str, day: str) -> str:
    """`ods.orders[tag 2024-01-02]`, for messages (a `dt` table's is `ods.orders[dt=2024-01-02]`)."""
    return f"{ods_ref(table).qualified}[tag {day}]"


def live_rows(summary: Any) -> int | None:
    """The live rows of a snapshot from its summary (a Java map or a dict): its data files' records less the rows
    its delete files (deletion vectors, position deletes) remove; None when the summary does not say.

    >>> live_rows({"total-records": "10", "total-position-deletes": "3", "total-equality-deletes": "0"})
    7
    >>> live_rows({}) is None
    True
    """
    total = summary.get("total-records")
    if total is None:
        return None
    if int(summary.get("total-equality-deletes") or 0):
        return None  # an equality delete may match any number of rows: only a scan counts them
    return int(total) - int(summary.get("total-position-deletes") or 0)


def day_counts(store: IcebergTables, table: str) -> dict[str, int]:
    """Published day -> live rows of `ods.<table>` at its tag (from the snapshot summaries). Within
    `store.counts_read_once()` the table's tags are read once (a range run reads the same days for every period)."""
    return dict(store.read_once(f"{ods_ref(table).qualified}@tags", lambda: _day_counts(store, table)))


def _day_counts(store: IcebergTables, table: str) -> dict[str, int]:
    ref = ods_ref(table)
    counts: dict[str, int] = {}
    if not store.exists(ref):
        return counts
    store.refresh(ref)
    for name, snapshot in refs.tagged_snapshots(store, ref).items():
        if not is_day_tag(name):
            continue
        rows = live_rows(snapshot.summary())
        if rows is None:  # no totals in the summary: count the tag's rows
            rows = store.spark.sql(
                f"SELECT count(*) AS n FROM {store.name(ref)} VERSION AS OF {int(snapshot.snapshotId())}"
            ).first()["n"]
        counts[name] = int(rows)
    return counts


def require_days(store: IcebergTables, table: str, days: Iterable[str], needed_by: str = "") -> int:
    """The live rows of `ods.<table>` at each of `days`' tags, summed (metadata only), or `MissingPartitionError`
    naming every day that has no tag."""
    wanted = [day_tag(d) for d in days]
    counts = day_counts(store, table)
    missing = [d for d in wanted if d not in counts]
    if missing:
        labels = ", ".join(day_label(table, d) for d in missing[:10])
        more = f" (and {len(missing) - 10} more)" if len(missing) > 10 else ""
        who = f" needed by {needed_by}" if needed_by else ""
        raise MissingPartitionError(
            f"upstream day not published{who}: {labels}{more} (no such tag: never published, rolled back, or "
            "expired by the ODS upkeep's retention)"
        )
    return sum(counts[d] for d in wanted)


def read_days(store: IcebergTables, table: str, days: Iterable[str], needed_by: str = "") -> DataFrame:
    """The live rows of `ods.<table>` at each of `days`' tags, each row with its day in column `dt` (the shape a
    `dt` table's partitions had); `MissingPartitionError` names every day that has no tag."""
    wanted = sorted({day_tag(d) for d in days})
    require_days(store, table, wanted, needed_by)
    name = store.name(ods_ref(table))
    frames = [
        store.spark.sql(f"SELECT * FROM {name} VERSION AS OF '{d}'").withColumn(DAY_COLUMN, F.lit(d))
        for d in wanted
    ]
    if not frames:
        return store.spark.table(name).limit(0).withColumn(DAY_COLUMN, F.lit(None).cast("string"))
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame, allowMissingColumns=True)  # a later day may have more columns
    return out


def day_snapshots(store: IcebergTables, table: str) -> list[dict[str, Any]]:
    """Every published day of `ods.<table>`, oldest first: its tag's snapshot, when that was committed (epoch ms),
    its live rows, the `sharp.*` properties of its summary (the attempt that wrote it, when the writer set them and
    the snapshot is the day's own), and whether `main` is at it. What `table history` shows and `table rollback`
    records of an ODS table."""
    ref = ods_ref(table)
    store.refresh(ref)
    main_id = refs.ref_snapshot(store, ref, refs.MAIN)
    out = []
    for name, snapshot in refs.tagged_snapshots(store, ref).items():
        if not is_day_tag(name):
            continue
        summary = {str(k): str(v) for k, v in dict(snapshot.summary()).items()}
        props = sharp_properties(summary)
        if props.get("day", name) != name:
            # The day changed nothing here, so it committed nothing: its tag is at an earlier day's snapshot,
            # whose properties name that day's attempt, not the one that published this day.
            props = {}
        out.append(
            {
                "day": name,
                "snapshot_id": int(snapshot.snapshotId()),
                "committed_ms": int(snapshot.timestampMillis()),
                "rows": live_rows(summary),
                "is_main": int(snapshot.snapshotId()) == main_id,
                "properties": props,
            }
        )
    return out


def is_day_tagged(store: IcebergTables, database: str, name: str) -> bool:
    """Is `database.name` an ODS table in the tagged layout (`ods.<t>`, unpartitioned, its days tags)? A
    `dt`-partitioned `ods.<t>` not yet migrated (`ods_migrate`) is not."""
    ref = ods_ref(name)
    if database != ref.database or not store.exists(ref):
        return False
    return bool(store.java_table(ref).spec().isUnpartitioned())
