"""How an ODS table keeps its days: one current-state Iceberg table written merge-on-read, one tag per published day.

The one rule (issue 33), used by every writer and reader of ODS:

- `ods.<table>` is the table's **current state**: its live rows, the source table's columns plus `_binlog_seq`
  (the binlog position of the change that last set the row; what the out-of-order rule compares). No `dt` column.
  A day's merge writes only the rows the day's changes produce plus deletes of the rows they replace (format v3
  deletion vectors); `select * from ods.<table>` is the latest published day.
- Published day D is the Iceberg **tag named exactly the partition key** `'YYYY-MM-DD'` (`day_tag`), so SQL reads a
  day as `FROM ods.orders VERSION AS OF '${dt}' AS o`. The bootstrap snapshot is the tag of the day before the
  source's start.
- `ods_state.<table>` keeps what the out-of-order rule needs about deleted keys: one row per deleted key (the key
  columns, the shard column when sharded, `_binlog_seq` of the delete), so that a replayed older event cannot bring
  a deleted row back. Same layout (current state, merge-on-read, one tag per published day, same tag names), so
  that a re-run of day D reads both tables at D's predecessor tag.
- A day is staged on a branch `stage_<token>` of each table, audited there, then published: `main` fast-forwarded
  to the branch, then the day's tag created at that snapshot (`ods_store.publish_days`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import date

from sharp_dagster.periods import day_before
from sharp_dagster.spark.tables import TableRef

ODS_DATABASE = "ods"
TOMBSTONE_DATABASE = "ods_state"

# Format v3: deletes are deletion vectors (one Puffin bitmap per data file), which readers apply cheaply and a
# later delete of the same file merges into. Every row-level write (MERGE, DELETE, UPDATE) is merge-on-read: it
# writes the new rows and the deletes, never rewrites the untouched rows of a data file. No
# `write.spark.accept-any-schema` (the other warehouse tables have it): with it, Spark 4.1 cannot resolve the target's
# columns in a `MERGE INTO` ("`t`.`id` cannot be resolved"); a day's new columns are added by ALTER TABLE instead.
# A `DELETE` writes its deletion vectors where it found the rows (`write.delete.distribution-mode` none), without
# first shuffling them by data file: one Spark job instead of two for a day's delete of held keys. A file read in
# several splits still gets one vector (Iceberg merges them at the commit: measured on a 200,000-row file read in
# 2 KB splits, the same rows as the hash mode's).
ODS_TABLE_PROPERTIES = {
    "format-version": "3",
    "write.delete.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
    "write.merge.mode": "merge-on-read",
    "write.distribution-mode": "none",
    "write.delete.distribution-mode": "none",
}

_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def day_tag(day: str) -> str:
    """The Iceberg tag of published day `day`: the day's partition key itself ('YYYY-MM-DD').

    >>> day_tag("2024-01-31")
    '2024-01-31'
    """
    if not isinstance(day, str) or not _DAY.match(day):
        raise ValueError(f"ODS day {day!r} is not a partition key 'YYYY-MM-DD'")
    date.fromisoformat(day)  # a real calendar day
    return day


def is_day_tag(name: str) -> bool:
    """Is the snapshot reference `name` a published day's tag (not a branch or another tag)?

    >>> is_day_tag("2024-01-31"), is_day_tag("stage_x"), is_day_tag("2024-02-30")
    (True, False, False)
    """
    try:
        day_tag(name)
    except ValueError:
        return False
    return True


def previous_day(day: str) -> str:
    """The published day a merge of `day` starts from: the calendar day before it (`periods.day_before`), whose
    tag must exist (`start_of`). The one place the ODS decides it.

    >>> previous_day("2024-03-01")
    '2024-02-29'
    """
    return day_before(day_tag(day))


def start_of(day: str, published: Sequence[str]) -> str | None:
    """`previous_day(day)` when it is among the `published` days (its tag exists), else None: a merge of `day`
    has no state to start from.

    >>> start_of("2024-01-02", ["2023-12-31", "2024-01-01"]), start_of("2024-01-03", ["2024-01-01"])
    ('2024-01-01', None)
    """
    before = previous_day(day)
    return before if before in published else None


def days_after(published: Sequence[str], last: str) -> list[str]:
    """The `published` days after `last` (oldest first): a run of `last` (or of a range ending there) re-publishes
    them after it.

    >>> days_after(["2024-01-01", "2024-01-02", "2024-01-03"], "2024-01-01")
    ['2024-01-02', '2024-01-03']
    """
    return [d for d in published if d > last]


def ods_ref(table: str) -> TableRef:
    """The current-state table `ods.<table>` (not partitioned: each day is a tag)."""
    return TableRef(ODS_DATABASE, table, ())


def tombstones_ref(table: str) -> TableRef:
    """The deleted keys of `ods.<table>` with the binlog position of their delete: `ods_state.<table>`."""
    return TableRef(TOMBSTONE_DATABASE, table, ())
