"""An ODS table's days staged on one branch as the publish lifecycle handles them (`StagedOds`): read by the strong
rules at a day's snapshot, published in one fenced reference commit (`main` moved, every day tagged), or discarded.

A run of day D stages D and, when later days are published already (a re-run of D: `later_days`), every one of
them after it on the same branch cut at D's predecessor tag (`ods_merge.stage_days`): the later days' states
are rebuilt on the new D, and one publish re-tags them all. A range batch stages its days the same way, each
period reading its own day's snapshot (`StagedOds.day`). The lifecycle audits the later days too before that
publish, each day's rules against its own snapshot (`StagedOds.later_parts`, `publish/later.py`).

The rows a day holds come from its snapshot's summary (`ods_read.live_rows`: records less the deletion vectors'
rows; the merge-on-read writes delete each replaced row exactly once, so no data file is read to count the state).
Nothing here imports Dagster.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql.types import StructType

from sharp_dagster.cdc.merge.fold import DayEvents
from sharp_dagster.cdc.ods import merge as ods_merge
from sharp_dagster.cdc.ods import store as ods_store
from sharp_dagster.cdc.ods.premerge import drop_premerges, stage_premerged
from sharp_dagster.cdc.ods.read import live_rows
from sharp_dagster.cdc.ods.store import StagedDay
from sharp_dagster.cdc.ods.versions import days_after, ods_ref
from sharp_dagster.spark.iceberg import IcebergTables
from sharp_dagster.spark.wap import StalePublishError, snapshot_properties


@dataclass(frozen=True)
class StagedOds:
    """Days of `ods.<table>` merged onto `branch`, not yet published; `own` of them belong to the runs that staged
    them (the rest are later published days re-merged after them). `expected_main` is the fence of the publish."""

    table: str
    branch: str
    days: tuple[StagedDay, ...]
    expected_main: int | None
    own: tuple[str, ...]
    live: tuple[int, ...]  # the live rows of each staged day, in the order of `days`
    schema: StructType
    reads: tuple[int | None, ...] = ()  # the changes read for each staged day (its rules' source_count)

    def day(self, day: str) -> StagedOdsDay:
        """One staged day as a period of the lifecycle sees it (what its rules read, its counts)."""
        index = [s.day for s in self.days].index(day)
        staged = self.days[index]
        read = self.reads[index] if self.reads else None
        return StagedOdsDay(self, staged.heads[0], self.live[index], staged.changed, read)

    @property
    def parts(self) -> list[StagedOdsDay]:
        """The runs' own days, oldest first (a range batch: one per period)."""
        return [self.day(day) for day in self.own]

    @property
    def later(self) -> list[str]:
        """The published days re-merged after the run's own days (a re-run re-publishes them)."""
        return [s.day for s in self.days if s.day not in self.own]

    @property
    def later_parts(self) -> list[tuple[str, StagedOdsDay]]:
        """The later days this publish re-publishes, each as the lifecycle audits it before the publish (its rules
        against its own snapshot, with its own parameters: `publish/later.py`)."""
        return [(day, self.day(day)) for day in self.later]

    @property
    def label(self) -> str:
        first, last = self.own[0], self.own[-1]
        days = first if first == last else f"{first}..{last}"
        again = f" and re-published the later day(s) {', '.join(self.later)}" if self.later else ""
        return f"ods.{self.table} {days}{again}"

    def publish(self, store: IcebergTables) -> int:
        """Fence on `main`, move it to the branch, tag every day (`StalePublishError` when `main` moved)."""
        return ods_merge.publish(store, self.table, self.branch, self.days, self.expected_main)

    def discard(self, store: IcebergTables) -> None:
        ods_store.drop_branch(store, self.table, self.branch)


@dataclass(frozen=True)
class StagedOdsDay:
    """A day of a `StagedOds` as the lifecycle reads it: the rules read the day's state at its snapshot; its rows
    are the day's live rows, its changed keys what the day's merge wrote."""

    staged: StagedOds
    snapshot: int  # the day's head on the branch of `ods.<table>`
    row_count: int
    changed: int
    source_count: int | None = None  # the changes read for the day

    def read(self, store: IcebergTables) -> DataFrame:
        """The day's whole state on the branch (its snapshot, not the branch head: later days may follow it)."""
        name = store.name(ods_ref(self.staged.table))
        return store.spark.sql(f"SELECT * FROM {name} VERSION AS OF {self.snapshot}")

    @property
    def schema(self) -> StructType:
        return self.staged.schema

    @property
    def label(self) -> str:
        return self.staged.label

    @property
    def later_parts(self) -> list[tuple[str, StagedOdsDay]]:
        return self.staged.later_parts

    def publish(self, store: IcebergTables) -> int:
        return self.staged.publish(store)

    def discard(self, store: IcebergTables) -> None:
        self.staged.discard(store)


def later_days(store: IcebergTables, table: str, last: str) -> list[str]:
    """The published days after `last` as the table has them now (`versions.days_after`): a run of `last` (or of a
    range ending there) re-publishes them after it."""
    return days_after(ods_store.published_days(store, table), last)


def stage(
    store: IcebergTables,
    table: str,
    branch: str,
    days: tuple[Sequence[str], Sequence[str]],
    changes_of: Callable[[str], tuple[DataFrame, DayEvents | None]],
    key_columns: Sequence[str],
    shard_column: str | None = None,
    properties: Mapping[str, Mapping[str, str]] | None = None,
    reads: Mapping[str, int] | None = None,
    published: Sequence[str] | None = None,
) -> StagedOds:
    """Merge the run's days and the later published days, `days = (own, later)` (consecutive, oldest first; `later`
    as `later_days` gave it), onto `branch` cut at the tag of the day before the first, each day's commits
    carrying `properties[day]`. `StalePublishError` when another day was published since `later` was read (it
    would be lost). `reads`: the changes read per day (the day's rules' source_count). `published`: the table's
    published days as the caller read them for this stage (`later` came from them), so the branch is cut without
    reading them again; they are read once more after the merge, to see a day published meanwhile. A failure
    drops the branch."""
    own, later = list(days[0]), list(days[1])
    try:
        # A new day pre-merged as its hours landed (`premerge.py`) merges only its last hours; else the whole day.
        premerged = (
            stage_premerged(
                store,
                table,
                own[0],
                branch,
                changes_of(own[0])[0],
                key_columns,
                shard_column,
                (properties or {}).get(own[0]),
                published,
            )
            if len(own) == 1 and not later
            else None
        )
        staged, expected_main = premerged or ods_merge.stage_days(
            store, table, branch, [*own, *later], changes_of, key_columns, shard_column, properties, published
        )
        if not premerged:  # merged whole: what a range's or a re-run's days pre-merged is of no more use
            drop_premerges(store, table, [*own, *later])
        now = later_days(store, table, own[-1])  # the fence against a day published since `later` was read
        if now != later:
            raise StalePublishError(
                f"ods.{table}: day(s) {sorted(set(now) - set(later))} published meanwhile"
            )
        live = tuple(_live_rows(store, table, s.heads[0]) for s in staged)
    except BaseException:
        ods_store.drop_branch(store, table, branch)
        raise
    schema = store.spark.table(store.name(ods_ref(table))).schema
    read = tuple((reads or {}).get(s.day) for s in staged)
    return StagedOds(table, branch, tuple(staged), expected_main, tuple(own), live, schema, read)


def _live_rows(store: IcebergTables, table: str, snapshot: int) -> int:
    """The live rows of a staged day: from its snapshot's summary (`ods_read.live_rows`), counted when it does
    not say."""
    found = live_rows(store.java_table(ods_ref(table)).snapshot(snapshot).summary())
    if found is not None:
        return found
    return store.spark.sql(f"SELECT * FROM {store.name(ods_ref(table))} VERSION AS OF {snapshot}").count()


def day_properties(
    attempts: Mapping[str, tuple[str, Mapping[str, str]]], later: Sequence[str]
) -> dict[str, dict[str, str]]:
    """What each staged day's commits carry (`sharp.*`, as every log-driven table's): the attempt that merged it
    (`attempts`: day -> its fencing token and properties, oldest day first) and the day. A later day re-merged
    after a re-run names the re-run's last day's attempt.

    >>> day_properties({"2024-01-02": ("7", {"job_id": "j"})}, ["2024-01-03"])["2024-01-03"]
    {'sharp.token': '7', 'sharp.job_id': 'j', 'sharp.day': '2024-01-03'}
    """
    last = list(attempts.values())[-1]
    out = {}
    for day in [*attempts, *later]:
        token, properties = attempts.get(day, last)
        out[day] = snapshot_properties(token, {**properties, "day": day})
    return out
