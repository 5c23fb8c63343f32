"""A day of an ODS table merged as its hours land (`premerge_hours`), so that the day's merge after its last done
marker merges only the hours not merged yet (`stage_premerged`) instead of the whole day.

The pre-merge branch `premerge_<day>` of `ods.<table>` and `ods_state.<table>` is cut at the previous day's tag;
each call merges the newly done hours onto it with the day's own merge (`merge.merge_into` on those hours' changes)
and records in its head's summary (`RECORD`) the tags it was cut at, each hour it absorbed with the identity of its
changes as landed then (row count and a hash of every event: a re-landed or rolled-back hour changes it), and the
newest position absorbed.

Merging the day hour by hour gives `merge_day`'s rows when every event of an hour is newer (binlog position) than
every event of the hours merged before it, and the day has no truncate and no DDL: `finalize` then keeps, for each
column, the latest setter newer than the state before the day, whichever chunk it came in (a chunk's state row
carries the position of its key's latest event, older than every later chunk's events, so "newer than the state
row" is "newer than the day's starting state"), and a tombstone keeps its key's position the same way. A truncate
changes rows the hour never names, a DDL the columns of rows merged before it, and an out-of-order event could lose
to a newer one of an earlier chunk on a column it alone sets: such a day is marked as not pre-mergeable
(`fallback`) and its day's merge is today's whole-day merge. So is any day whose record no longer fits: the
previous day re-published, an absorbed hour re-landed, or hours absorbed out of order.

Nothing here imports Dagster.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sharp_dagster.cdc.landing.image_tables import read_typed_images
from sharp_dagster.cdc.merge.fold import day_events
from sharp_dagster.cdc.ods import store as ods_store
from sharp_dagster.cdc.ods.merge import merge_into, predecessor
from sharp_dagster.cdc.ods.store import StagedDay
from sharp_dagster.cdc.ods.versions import day_tag, ods_ref
from sharp_dagster.spark import refs
from sharp_dagster.spark.checkpoint import checkpoint
from sharp_dagster.spark.iceberg import IcebergTables

RECORD = "sharp.premerge"  # the summary property of the pre-merge branch's head: `Record` as JSON
# The event columns an hour's identity hashes (those the changes have: typed images or raw binlog rows).
DAY_HOURS = tuple(f"{i:02d}" for i in range(24))
IDENTITY_COLUMNS = (
    "event_uid",
    "binlog_seq",
    "op",
    "before",
    "after",
    "before_json",
    "after_json",
    "ddl_sql",
)


def premerge_branch(day: str) -> str:
    """The pre-merge branch of `day` on both tables of an ODS table."""
    return f"premerge_{day}"


@dataclass(frozen=True)
class Hour:
    """One landed hour of a table's changes: its identity (rows and a hash of its events), its oldest and newest
    position, and whether it holds a truncate or a DDL."""

    hour: str
    identity: str
    first: int | None
    last: int | None
    table_events: int


@dataclass(frozen=True)
class Record:
    """What the pre-merge branch absorbed: the previous day's tags it was cut at (`ods`, `ods_state` snapshots),
    each hour with its identity, the newest position absorbed, and why the day cannot be pre-merged (None when it
    can)."""

    base: tuple[int, int]
    hours: tuple[tuple[str, str], ...] = ()
    last: int | None = None
    fallback: str | None = None
    changed: int = 0  # keys written per merged chunk, summed (a key touched in two chunks counts twice)

    def dumps(self) -> str:
        return json.dumps(
            {
                "base": list(self.base),
                "hours": [list(h) for h in self.hours],
                "last": None if self.last is None else str(self.last),
                "fallback": self.fallback,
                "changed": self.changed,
            }
        )

    @staticmethod
    def loads(text: str) -> Record:
        data = json.loads(text)
        last = data.get("last")
        return Record(
            tuple(data["base"]),
            tuple(tuple(h) for h in data["hours"]),
            None if last is None else int(last),
            data.get("fallback"),
            int(data.get("changed", 0)),
        )


@dataclass(frozen=True)
class Premerged:
    """What one `premerge_hours` call did: the hours merged now, the hours the branch holds, and why the day is
    not pre-mergeable (None when it is)."""

    merged: tuple[str, ...]
    absorbed: tuple[str, ...]
    fallback: str | None = None
    restarted: bool = False
    notes: list[str] = field(default_factory=list)


def hours_of(changes: DataFrame) -> dict[str, Hour]:
    """Each landed hour of `changes` (a day's, with the landing's `hour` column): one grouped job."""
    if "hour" not in changes.columns:
        raise ValueError(f"the changes have no `hour` column (columns: {', '.join(changes.columns)})")
    hashed = [F.col(c) for c in IDENTITY_COLUMNS if c in changes.columns]
    digest = F.sum(F.xxhash64(*hashed).cast("decimal(38,0)"))
    seq = F.col("binlog_seq").cast("decimal(38,0)")
    rows = (
        changes.groupBy(F.col("hour").cast("string").alias("hour"))
        .agg(
            F.count(F.lit(1)).alias("n"),
            digest.alias("digest"),
            F.min(seq).alias("first"),
            F.max(seq).alias("last"),
            F.count_if(F.col("op").isin("t", "ddl")).alias("table_events"),
        )
        .collect()
    )
    out = {}
    for r in rows:
        first, last = (None if v is None else int(v) for v in (r["first"], r["last"]))
        out[r["hour"]] = Hour(r["hour"], f"{r['n']}:{r['digest']}", first, last, int(r["table_events"]))
    return dict(sorted(out.items()))


def read_record(store: IcebergTables, table: str, day: str) -> Record | None:
    """The record on the head of `day`'s pre-merge branch of `ods.<table>`, None when there is no such branch."""
    return _record_at(store, table, ods_store.ref_snapshot(store, ods_ref(table), premerge_branch(day)))


def _record_at(store: IcebergTables, table: str, snapshot: int | None) -> Record | None:
    if snapshot is None:
        return None
    text = store.java_table(ods_ref(table)).snapshot(snapshot).summary().get(RECORD)
    return Record.loads(str(text)) if text is not None else None


def _base(
    store: IcebergTables, table: str, day: str, published: Sequence[str] | None = None
) -> tuple[int, int]:
    """The snapshots of the tags of the day `day` merges onto, on both tables."""
    before = day_tag(predecessor(store, table, day, published))
    return tuple(int(ods_store.ref_snapshot(store, ref, before)) for ref in ods_store.both(table))  # type: ignore[return-value]


def _absorbed_still(record: Record | None, base: tuple[int, int], hours: Mapping[str, Hour]) -> bool:
    """Does `record` still describe the day: cut at the same tags, each absorbed hour landed as it was then?"""
    if record is None or tuple(record.base) != tuple(base):
        return False
    return all(h in hours and hours[h].identity == identity for h, identity in record.hours)


def _unfit(record: Record, new: Sequence[Hour]) -> str | None:
    """Why merging `new` (the next hours, in order) onto what `record` absorbed would not be `merge_day`'s."""
    last = record.last
    for h in new:
        if h.table_events:
            return f"hour {h.hour} holds a truncate or a DDL"
        if h.first is not None and last is not None and h.first <= last:
            return f"hour {h.hour} holds an event at or before position {last} of an hour merged before it"
        last = h.last if h.last is not None else last
    return None


def _next_hours(record: Record, done: Sequence[str], hours: Mapping[str, Hour]) -> list[Hour]:
    """The done hours after the absorbed ones, in order, up to the first gap (an hour never follows a missing one);
    a done hour with no changes is an empty `Hour`."""
    absorbed = {h for h, _ in record.hours}
    out = []
    for hour in sorted(done):
        if hour in absorbed:
            continue
        out.append(hours.get(hour, Hour(hour, "0:None", None, None, 0)))
    expected = [f"{i:02d}" for i in range(len(absorbed), len(absorbed) + len(out))]
    kept = []
    for h, want in zip(out, expected, strict=False):
        if h.hour != want:
            break
        kept.append(h)
    return kept


def _commit_record(store: IcebergTables, table: str, branch: str, record: Record) -> None:
    """`record` on the head of `branch` of `ods.<table>` (an empty snapshot when the merge left another head)."""
    if _record_at(store, table, ods_store.ref_snapshot(store, ods_ref(table), branch)) != record:
        refs.empty_snapshot(store, ods_ref(table), branch, {RECORD: record.dumps()})


def premerge_hours(
    store: IcebergTables,
    table: str,
    day: str,
    changes: DataFrame,
    done: Sequence[str],
    key_columns: Sequence[str],
    shard_column: str | None = None,
) -> Premerged:
    """Merge the hours of `day` done since the last call (`done`: the hours with a done marker, "00".."23";
    `changes`: the day's landed changes, with their `hour`) onto the pre-merge branch, cut (again) at the previous
    day's tags when there is none or its record no longer fits the landed hours. Hours merge in order from 00; a
    day that cannot be pre-merged exactly is recorded as such (`Record.fallback`) and merged whole at its end."""
    branch = premerge_branch(day)
    try:
        base = _base(store, table, day)
    except LookupError as missing:  # no published previous day (a first day, a gap): merged whole at its end
        return Premerged((), (), str(missing))
    hours = hours_of(changes)
    record = read_record(store, table, day)
    restarted = not _absorbed_still(record, base, hours)
    if restarted:
        ods_store.cut(store, table, branch, predecessor(store, table, day))
        record = Record(base)
    assert record is not None
    absorbed = tuple(h for h, _ in record.hours)
    if record.fallback:
        return Premerged((), absorbed, record.fallback, restarted)
    new = _next_hours(record, done, hours)
    if not new:
        if restarted:
            _commit_record(store, table, branch, record)
        return Premerged((), absorbed, None, restarted)
    taken = (*record.hours, *((h.hour, h.identity) for h in new))
    reason = _unfit(record, new)
    if reason is not None:
        _commit_record(store, table, branch, Record(base, taken, record.last, reason, record.changed))
        return Premerged((), absorbed, reason, restarted)
    last = max(
        [h.last for h in new if h.last is not None] + ([record.last] if record.last is not None else [])
    )
    chunk = changes.where(F.col("hour").cast("string").isin(*[h.hour for h in new]))
    written = 0
    if any(h.last is not None for h in new):
        staged = merge_into(
            store, table, day, branch, chunk, key_columns, shard_column=shard_column, events=day_events([])
        )
        written = staged.changed
    after = Record(base, taken, last, None, record.changed + written)
    _commit_record(store, table, branch, after)
    return Premerged(tuple(h.hour for h in new), tuple(h for h, _ in taken), None, restarted)


def premerge_landed(
    store: IcebergTables,
    database: str,
    table: str,
    day: str,
    done: Sequence[str],
    key_columns: Sequence[str],
    shard_column: str | None = None,
) -> Premerged | None:
    """After the landing marked hours of `day` done (`done`: every hour of the day with a marker): the hours not
    merged yet onto `ods.<table>`'s pre-merge branch, from the landing's typed images (`premerge_hours`). None when
    there is nothing to pre-merge onto or from (no ODS table yet, no images of the table)."""
    if len(done) == 24 or not ods_store.exists(store, table):
        return None  # a complete day: its own merge runs now
    changes = read_typed_images(store, database, table, day)
    if changes is None:
        return None
    return premerge_hours(store, table, day, checkpoint(changes), done, key_columns, shard_column)


def drop_premerges(store: IcebergTables, table: str, days: Sequence[str]) -> list[str]:
    """The pre-merge branches of `days` that exist dropped (one commit per table, none when there are none): a
    range or a re-run merged those days whole, so what their hours pre-merged is no longer of use. Returns the
    days whose branch was dropped."""
    there = [d for d in days if ods_store.ref_snapshot(store, ods_ref(table), premerge_branch(d)) is not None]
    if there:
        for ref in ods_store.both(table):
            if store.exists(ref):
                store.drop_branches(ref, [premerge_branch(d) for d in there])
    return there


def stage_premerged(
    store: IcebergTables,
    table: str,
    day: str,
    branch: str,
    changes: DataFrame,
    key_columns: Sequence[str],
    shard_column: str | None = None,
    properties: Mapping[str, str] | None = None,
    published: Sequence[str] | None = None,
) -> tuple[list[StagedDay], int | None] | None:
    """Day `day` staged on `branch` from its pre-merge branch: when the branch still fits the day's landed
    changes (`changes`: all 24 hours, with their `hour`), `branch` is cut at its heads, the hours it has not
    absorbed are merged onto it (one `merge_into`), and the pre-merge branch is dropped; returns what
    `merge.stage_days` returns. None (and the pre-merge branch dropped) when it does not fit: the caller merges
    the day whole."""
    pre = premerge_branch(day)
    # The heads first, the record from the `ods` head read: an hour pre-merged meanwhile is merged again (the
    # merge is idempotent by position), never left out.
    heads = [ods_store.ref_snapshot(store, ref, pre) for ref in ods_store.both(table)]
    record = _record_at(store, table, heads[0])
    if record is None:
        return None
    hours = hours_of(changes)
    base = _base(store, table, day, published)
    still = _absorbed_still(record, base, hours)
    rest = _next_hours(record, DAY_HOURS, hours) if still else []
    covered = {h for h, _ in record.hours} | {h.hour for h in rest}
    fits = still and not record.fallback and set(hours) <= covered and _unfit(record, rest) is None
    if not fits:
        ods_store.drop_branch(store, table, pre)
        return None
    expected_main = ods_store.ref_snapshot(store, ods_ref(table), "main")
    for ref, head in zip(ods_store.both(table), heads, strict=True):
        refs.cut_branch(store, ref, branch, at_snapshot=head)
    ods_store.drop_branch(store, table, pre)
    changed = record.changed
    if any(h.last is not None for h in rest):
        chunk = changes.where(F.col("hour").cast("string").isin(*[h.hour for h in rest]))
        events = day_events([])
        changed += merge_into(
            store,
            table,
            day,
            branch,
            chunk,
            key_columns,
            shard_column=shard_column,
            events=events,
            properties=properties,
        ).changed
    _carry_properties(store, table, branch, properties)
    heads = tuple(ods_store.ref_snapshot(store, ref, branch) for ref in ods_store.both(table))
    return [StagedDay(day, heads, changed)], expected_main


def _carry_properties(
    store: IcebergTables, table: str, branch: str, properties: Mapping[str, str] | None
) -> None:
    """The day's heads carry the attempt's properties (its tag's summary names the attempt, `cli ods days`): an
    empty snapshot on a table whose head is still a pre-merge commit (the last hours wrote nothing to it)."""
    wanted = dict(properties or {})
    if not wanted:
        return
    for ref in ods_store.both(table):
        head = ods_store.ref_snapshot(store, ref, branch)
        summary = store.java_table(ref).snapshot(head).summary()
        if any(str(summary.get(k)) != v for k, v in wanted.items()):
            refs.empty_snapshot(store, ref, branch, wanted)
