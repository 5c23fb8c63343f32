"""A day's merge into the current-state ODS layout (`ods_versions`): only the rows the day's changes produce, plus
deletes of the rows they replace, written merge-on-read on a staging branch.

`day_rows` is `merge.merge_day` restricted to the keys the day touches: the day is folded as `merge_day` folds it
(`fold.fold_per_key`), the state rows of those keys are found by one look at the state (keys, position, deleted flag,
and the columns partial images of the day lack; the day's keys broadcast), the state's other columns are read only
for the rows whose values the result keeps (a replayed older event), and each key's row after the day is
`merge_result.finalize` of the two, the function `merge_day` ends with. So `merge_day(state, day)` is exactly the
state's untouched rows plus `day_rows` (a test holds them to it). A day with a truncate, or a DDL that gives
existing rows a default, changes rows it never names: then every state row is a touched row. A day of few keys
(`SMALL_DAY_MAX_KEYS`) is held on the driver instead (`_small_day_rows`): no checkpoint, facts or count job.

`merge_into` writes those rows onto a branch of both tables (`write.write_day`; merge-on-read: the replaced rows get deletion vectors,
the new rows are appended): to `ods.<table>` a `DELETE FROM` of the rows it holds of the touched keys (the held
keys broadcast past a key-only scan of the state; which keys it holds: what `day_rows`' look found) and one append
of every live row of the day; to `ods_state.<table>` the keys the day deleted (with the delete's position), and
the keys it brought back removed from there (its source: only the rows that can change `ods_state`). Nothing of
the untouched state is rewritten, and the state is never shuffled.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from sharp_dagster.cdc.merge.fold import (
    BROADCAST_MAX_ROWS,
    DayEvents,
    build_plan,
    conform_base,
    fold_per_key,
    key_condition,
    key_stats,
    stats_columns,
    table_events,
)
from sharp_dagster.cdc.merge.plan import MergePlan, delta_key_names
from sharp_dagster.cdc.merge.result import DELETED_COLUMN, SEQ_COLUMN, SEQ_TYPE
from sharp_dagster.cdc.merge.result import finalize as _finalize
from sharp_dagster.cdc.ods import range_stage
from sharp_dagster.cdc.ods import store as ods_store
from sharp_dagster.cdc.ods.store import StagedDay
from sharp_dagster.cdc.ods.versions import day_tag, ods_ref, previous_day, start_of, tombstones_ref
from sharp_dagster.cdc.ods.write import DEAD, HELD, flags, tombstone_columns, write_day
from sharp_dagster.failpoints import failpoint
from sharp_dagster.spark import refs
from sharp_dagster.spark.checkpoint import checkpoint, on_driver
from sharp_dagster.spark.commit_properties import with_snapshot_properties
from sharp_dagster.spark.iceberg import IcebergTables

# Keys of a day at most which `day_rows` takes the small-day path: its fold and the state's rows of its keys held
# on the driver (a few MB at most), in place of checkpoints and count jobs.
SMALL_DAY_MAX_KEYS = 10_000


@dataclass(frozen=True)
class DayRows:
    """The rows of the keys a day touches after it (`merge_day`'s columns, checkpointed) and the merge's shape."""

    rows: DataFrame
    plan: MergePlan
    null_key: bool  # a key column holds a null: the writes match keys null-safely
    # `rows` plus `HELD` and `DEAD`: what the key-only look at the state found, kept so that the writes need no
    # second look at which keys `ods` or `ods_state` holds.
    flagged: DataFrame
    count: int  # rows (one per key the day touches; every state row when the day touches them all)
    # `count` within `day_rows`' `broadcast_max_rows`, the bound its look used for the day's keys (the same number
    # unless the day touches every row): the writes broadcast by this answer, not by a bound of their own.
    small: bool
    # rows of `flagged` whose key `ods` holds (`HELD`), and live rows of the day: counted with `count`, so the
    # writes ask neither again
    held: int = 0
    live: int = 0
    # `flagged` is held on the driver (`checkpoint.on_driver`: the small-day path), and does the day leave a tombstone
    # to write or remove (a deleted row, or a key `ods_state` holds)? Counted with `count` on the general path.
    local: bool = False
    tombstones: bool = True


@dataclass(frozen=True)
class DayFacts:
    """What the writes and the state look need to know of the folded day: one job over it."""

    keys: int
    null_key: bool  # a key column holds a null
    lacking: list[str]  # the value columns some key of the day has no setter of (a partial image lacks them)
    oldest_setter: dict[str, object]  # per value column, the oldest position of the day's last setters of it


def day_rows(
    base: DataFrame | None,
    changes: DataFrame,
    key_columns: Sequence[str],
    *,
    shard_column: str | None = None,
    events: DayEvents | None = None,
    columns: Sequence[tuple[str, str]] | None = None,
    broadcast_max_rows: int = BROADCAST_MAX_ROWS,
    small_max_keys: int = SMALL_DAY_MAX_KEYS,
) -> DayRows:
    """The row after the day of every key it touches, as `merge.merge_day(base, changes, ...)` gives it (tombstones
    included): that result is `base`'s rows of the other keys plus these. A day of at most `small_max_keys` keys
    takes the small-day path (`_small_day_rows`); 0 never does."""
    events = events if events is not None else table_events(changes)
    plan = build_plan(base, changes, key_columns, columns, shard_column, events)
    folded = fold_per_key(changes, plan)
    if _small_day(plan, events, small_max_keys):
        local = on_driver(folded, small_max_keys)
        if local is not None:
            return _small_day_rows(base, local, plan)
    delta = checkpoint(folded)
    facts = _day_facts(delta, plan)
    null_key = facts.null_key
    if base is None:
        flagged = delta.select(*_finalize(plan, False, True), *flags(None))
        return _day_rows(flagged, plan, null_key, broadcast_max_rows)
    state = conform_base(base, plan)
    if (
        plan.truncates or plan.defaults or plan.cleared
    ):  # the day changes rows it never names: all are touched
        joined = state.join(delta, key_condition(plan), "full_outer")
    else:
        small = facts.keys <= broadcast_max_rows
        touched = _touched_state(state, delta, plan, facts, small)
        # The state's rows of the day's keys (at most one per key) broadcast past the day: only the fold shuffles.
        joined = (F.broadcast(touched) if small else touched).join(
            delta, key_condition(plan, null_key), "right"
        )
    flagged = joined.select(*_finalize(plan, True, None), *flags(F.col(DELETED_COLUMN)))
    return _day_rows(flagged, plan, null_key, broadcast_max_rows)


def _small_day(plan: MergePlan, events: DayEvents, small_max_keys: int) -> bool:
    """May the day take the small-day path? Not when it changes rows it never names (a truncate, a default, a
    cleared column: every state row is touched), nor when its changes, counted by the caller, are more than
    `small_max_keys` (at least as many as its keys: its fold would be collected in vain)."""
    if small_max_keys <= 0 or plan.truncates or plan.defaults or plan.cleared:
        return False
    return events.rows is None or events.rows <= small_max_keys


def _small_day_rows(base: DataFrame | None, delta: DataFrame, plan: MergePlan) -> DayRows:
    """`day_rows` of a day of few keys: its fold (`delta`) is held on the driver, the state's whole rows of its
    keys are found by one scan (the day's keys broadcast from the driver) and held there too, and each key's row
    after the day is `finalize` of the two, computed on the driver. No checkpoint, no count or facts job: the
    counts are read from the driver's rows. The same rows as the general path: `finalize` of the key's state row
    (whole, so no replayed event needs a second read) and its fold."""
    on = key_condition(plan, True)  # null-safe: a null key finds its state row
    keys = delta.select(*delta_key_names(plan))
    if base is None:
        touched = None
    else:
        state = conform_base(base, plan)
        touched = on_driver(state.join(F.broadcast(keys), on, "left_semi"))
    if touched is None:
        flagged = on_driver(delta.select(*_finalize(plan, False, True), *flags(None)))
    else:
        joined = delta.join(F.broadcast(touched), on, "left")
        flagged = on_driver(joined.select(*_finalize(plan, True, None), *flags(F.col(DELETED_COLUMN))))
    marks = flagged.select(HELD, DEAD, DELETED_COLUMN, *plan.keys).collect()  # on the driver: no job
    null_key = any(v is None for r in marks for v in r[3:])
    held_n = sum(1 for r in marks if r[0])
    live = sum(1 for r in marks if not r[2])
    tombstones = any(r[1] or r[2] for r in marks)
    rows = flagged.drop(HELD, DEAD)
    return DayRows(
        rows, plan, null_key, flagged, len(marks), True, held_n, live, local=True, tombstones=tombstones
    )


def _day_rows(flagged: DataFrame, plan: MergePlan, null_key: bool, broadcast_max_rows: int) -> DayRows:
    flagged = checkpoint(flagged)
    # One job: the day's keys (the state's rows when it touches all), held keys, live rows, tombstones to write.
    deleted = F.col(DELETED_COLUMN)
    counted = (F.lit(True), F.col(HELD), ~deleted, deleted | F.col(DEAD))
    count, held, live, dead = flagged.agg(*[F.count_if(c) for c in counted]).first()
    small = count <= broadcast_max_rows
    return DayRows(
        flagged.drop(HELD, DEAD), plan, null_key, flagged, count, small, held, live, tombstones=dead > 0
    )


def _day_facts(delta: DataFrame, plan: MergePlan) -> DayFacts:
    """The folded day's key count, null key, lacking columns and oldest setters, in one job over it."""
    per_column = []
    for j in range(len(plan.values)):
        setter = F.col(f"__c{j}")
        per_column += [F.max(setter.isNull()).alias(f"l{j}"), F.min(setter["s"]).alias(f"o{j}")]
    row = delta.agg(*stats_columns(plan), *per_column).first()
    values = list(enumerate(c for c, _ in plan.values))
    return DayFacts(
        *key_stats(row),
        [c for j, c in values if row[f"l{j}"]],
        {c: row[f"o{j}"] for j, c in values},
    )


def _touched_state(
    state: DataFrame, delta: DataFrame, plan: MergePlan, facts: DayFacts, small: bool
) -> DataFrame:
    """The state's rows of the day's keys, with the values `finalize` takes from them.

    One look at the state (keys, shard, position, deleted flag, and the value columns some key of the day has no
    setter of: the columns partial images lack), semi-joined against the day's keys. A value of the state row is
    used only when no event of the day newer than it sets the column (a partial image, a replayed older event), so
    a day of full images reads no value column of the state: the look stays key-only and its cost grows with the
    state's key column alone. Only a replayed event that leaves a column to the state which the look did not
    read costs a second read, of those columns, for those rows' keys; whether one can is first told by positions
    alone (`_replayed`). Where the look read a value `finalize` does not use, it does not change the result.
    """
    # A plain equi-join probes a faster hash table; without a null key in the day it is the same join.
    on = key_condition(plan, facts.null_key)
    hint = F.broadcast if small else (lambda df: df)
    read = facts.lacking
    day_keys = delta.select(*delta_key_names(plan))
    look = state.select(*_state_cols(plan, read)).join(hint(day_keys), on, "left_semi")
    unread = [(j, c) for j, (c, _) in enumerate(plan.values) if c not in read]
    found = checkpoint(look) if unread else look  # every column read: the result's join is its one reader
    plain = found.select(*_state_cols(plan, read, fill=True))
    if not unread or not _replayed(found, [facts.oldest_setter[c] for _, c in unread]):
        return plain
    wanted = [f"__n{j}" for j, _ in unread]
    needs = _needs(plan)
    marked = (
        hint(found.select(*_state_cols(plan, [])))
        .join(delta, on, "inner")
        .select(*delta_key_names(plan), *[n.alias(f"__n{j}") for j, n in enumerate(needs)])
    )
    marked = checkpoint(marked.where(" OR ".join(f"`{w}`" for w in wanted)))
    used = marked.agg(*[F.max(w).alias(w) for w in wanted]).first() if not marked.isEmpty() else None
    more = [c for j, c in unread if used and used[f"__n{j}"]]
    if not more:
        return plain
    columns = [*read, *more]
    needy = marked.select(*delta_key_names(plan))
    full = state.select(*_state_cols(plan, columns)).join(hint(needy), on, "left_semi")
    return full.select(*_state_cols(plan, columns, fill=True)).unionByName(
        plain.join(hint(needy), on, "left_anti")
    )


def _replayed(found: DataFrame, oldest: Sequence[object]) -> bool:
    """Can a live state row be as new as a day's last setter of a column (`oldest`: per column, the oldest)? Only
    then can `finalize` take a state value the look did not read: every key of the day sets these columns, and a
    setter newer than the state's row wins. One small job over the found rows' positions."""
    newest = found.where(~F.col(DELETED_COLUMN)).agg(F.max(F.col(SEQ_COLUMN).cast(SEQ_TYPE))).first()[0]
    known = [o for o in oldest if o is not None]
    return newest is not None and (len(known) < len(oldest) or min(known) <= newest)


def _state_cols(plan: MergePlan, values: Sequence[str], fill: bool = False) -> list:
    """The state's key, shard, position, deleted flag and `values` columns; with `fill`, every column of the
    state in `conform_base`'s order, the others typed nulls."""
    kept = {c.lower() for c in [*plan.keys, *([plan.shard] if plan.shard else []), *values]}
    out = []
    for name, typ in plan.columns:
        if name.lower() in kept:
            out.append(F.col(f"`{name}`"))
        elif fill:
            out.append(F.lit(None).cast(typ).alias(name))
    return [*out, F.col(SEQ_COLUMN), F.col(DELETED_COLUMN)]


def _needs(plan: MergePlan) -> list[Column]:
    """Per value column, on a state row joined with its key's fold: does `finalize` take the state's value? Yes
    for a live row when no event of the day newer than it set the column."""
    base_seq = F.col(SEQ_COLUMN).cast(SEQ_TYPE)
    out = []
    for j in range(len(plan.values)):
        setter = F.col(f"__c{j}")["s"]
        newer = setter.isNotNull() & (base_seq.isNull() | (setter > base_seq))
        out.append(~F.col(DELETED_COLUMN) & ~newer)
    return out


def merge_into(
    store: IcebergTables,
    table: str,
    day: str,
    branch: str,
    changes: DataFrame,
    key_columns: Sequence[str],
    *,
    shard_column: str | None = None,
    events: DayEvents | None = None,
    columns: Sequence[tuple[str, str]] | None = None,
    properties: Mapping[str, str] | None = None,
) -> StagedDay:
    """Merge day `day`'s changes into the state on `branch` (cut at the previous day's tag: `ods_store.cut`) and
    write the result there, every commit carrying `properties` (the attempt's: `wap.snapshot_properties`). Without
    the tables yet (a table's first day with no bootstrap) they are created from the day's columns and the branch
    cut at their empty `main`."""
    fresh = not ods_store.exists(store, table)
    base = None if fresh else _state_before(store, table, branch, day)
    merged = day_rows(base, changes, key_columns, shard_column=shard_column, events=events, columns=columns)
    plan = merged.plan
    if fresh:
        ods_store.create_tables(store, table, plan.columns, tombstone_columns(plan))
        for ref in ods_store.both(table):
            refs.cut_branch(store, ref, branch)
    _evolve(store, table, plan, day)
    write_day(
        store,
        table,
        branch,
        merged.flagged,
        plan,
        properties,
        merged.null_key,
        merged.small,
        (merged.held, merged.live),
        merged.local,
        merged.tombstones,
    )
    _schema_snapshot(store, table, branch, properties)
    heads = tuple(ods_store.ref_snapshot(store, ref, branch) for ref in ods_store.both(table))
    return StagedDay(day, heads, merged.count)


def _schema_snapshot(
    store: IcebergTables, table: str, branch: str, properties: Mapping[str, str] | None
) -> None:
    """When the day wrote no row and the branch's head was written with an older schema than the table's (the
    day's DDL renamed, dropped, retyped or added a column; a re-run finds it applied already), an empty snapshot
    on the branch: a snapshot takes the schema current when it is committed, so the day's tag reads with the day's
    columns and the next day's schema check compares with them, not with the day before's."""
    ref = ods_ref(table)
    head = ods_store.ref_snapshot(store, ref, branch)
    java = store.java_table(ref)
    if head is not None and java.snapshot(head).schemaId() != java.schema().schemaId():
        refs.empty_snapshot(store, ref, branch, dict(properties or {}))


# A table property per column a day's ALTER added: the day it was added (`sharp.column-since.<column>`).
COLUMN_SINCE = "sharp.column-since."


def _state_before(store: IcebergTables, table: str, branch: str, day: str) -> DataFrame:
    """The state on `branch` as day `day` starts from it, with the columns it had then. A branch reads with the
    table's schema, which holds every column added since (a re-run of an earlier day: its later days' ALTERs were
    applied already); those are left out, so that the day that adds one adds it again, with its default for the
    rows from before it."""
    state = ods_store.state_at(store, table, branch)
    props = store.java_table(ods_ref(table)).properties()
    since = {
        str(k)[len(COLUMN_SINCE) :]: str(props.get(k))
        for k in props.keySet()
        if str(k).startswith(COLUMN_SINCE)
    }
    later = [c for c in state.columns if since.get(c.lower(), "") >= day]
    return state.drop(*later) if later else state


def _evolve(store: IcebergTables, table: str, plan: MergePlan, day: str) -> None:
    """The day's DDL followed on `ods.<table>` by Iceberg's own ALTER TABLE: renamed columns renamed (earlier tags
    still read the old name), the columns the day adds added, each with the day it was added (`COLUMN_SINCE`), a
    widened type promoted, columns the policy drops dropped (tags keep them)."""
    name = store.name(ods_ref(table))
    current = {f.name.lower(): f.dataType.simpleString() for f in store.spark.table(name).schema}
    for new, old in plan.renames:
        if old.lower() in current and new.lower() not in current:
            store.spark.sql(f"ALTER TABLE {name} RENAME COLUMN `{old}` TO `{new}`")
            current[new.lower()] = current.pop(old.lower())
    for column in plan.dropped:
        if column.lower() in current:
            store.spark.sql(f"ALTER TABLE {name} DROP COLUMN `{column}`")
            del current[column.lower()]
    for column, typ in plan.columns:
        if column.lower() not in current:
            store.spark.sql(f"ALTER TABLE {name} ADD COLUMN `{column}` {typ}")
            store.spark.sql(
                f"ALTER TABLE {name} SET TBLPROPERTIES ('{COLUMN_SINCE}{column.lower()}' = '{day}')"
            )
        elif current[column.lower()] != typ:
            store.spark.sql(f"ALTER TABLE {name} ALTER COLUMN `{column}` TYPE {typ}")
    store.refresh(ods_ref(table))


def write_state(
    store: IcebergTables,
    table: str,
    day: str,
    state: DataFrame,
    key_columns: Sequence[str],
    shard_column: str | None = None,
    properties: Mapping[str, str] | None = None,
) -> int:
    """Publish `state` (a bootstrap snapshot from `merge.initial_state`, or a migrated day: `merge_day`'s columns)
    as day `day`, the first of the days merged after it: its live rows to `ods.<table>`, its tombstones to
    `ods_state.<table>`, both tagged `day`, the commits carrying `properties` (the attempt's). A bootstrap taken
    again (`cdc bootstrap --force`) replaces the state on `main` (and `day`'s tag) when no later day is published;
    with later days it is refused (their states were merged from the old snapshot: roll the table back first).
    Returns the live rows written."""
    later = [d for d in ods_store.published_days(store, table) if d > day_tag(day)]
    if later:
        raise ValueError(
            f"ods.{table} has published days after {day} ({', '.join(later)}): a new starting state of {day} "
            f"would leave them merged from the old one; roll ods.{table} back to {day} first"
        )
    columns = [
        (f.name, f.dataType.simpleString())
        for f in state.schema
        if f.name not in (SEQ_COLUMN, DELETED_COLUMN)
    ]
    shard = shard_column if shard_column and shard_column not in key_columns else None
    dead_cols = [*key_columns, *([shard] if shard else [])]
    ods_store.create_tables(store, table, columns, dead_cols)
    rows = checkpoint(state)
    live = rows.where(~F.col(DELETED_COLUMN)).drop(DELETED_COLUMN)
    dead = rows.where(F.col(DELETED_COLUMN)).select(*[F.col(f"`{c}`") for c in dead_cols], SEQ_COLUMN)
    heads = []
    for ref, df in ((ods_ref(table), live), (tombstones_ref(table), dead)):
        # The whole state: a bootstrap taken again replaces what `main` held.
        with_snapshot_properties(store.spark, properties, df.writeTo(store.name(ref)).overwrite, F.lit(True))
        store.refresh(ref)
        heads.append(ods_store.ref_snapshot(store, ref, "main"))
    for ref, head in zip(ods_store.both(table), heads, strict=True):
        refs.tag(store, ref, day_tag(day), head)
    return live.count()


def predecessor(store: IcebergTables, table: str, day: str, published: Sequence[str] | None = None) -> str:
    """The published day a merge of `day` starts from (`versions.start_of`), a LookupError when it is not tagged;
    `published`: the table's published days when the caller read them already (else they are read here)."""
    days = ods_store.published_days(store, table) if published is None else published
    before = start_of(day, days)
    if before is None:
        raise LookupError(
            f"ods.{table}: no published state of {previous_day(day)} (its tag) to merge {day} onto"
        )
    return before


def stage_days(
    store: IcebergTables,
    table: str,
    branch: str,
    days: Sequence[str],
    changes_of: Callable[[str], tuple[DataFrame, DayEvents | None]],
    key_columns: Sequence[str],
    shard_column: str | None = None,
    properties: Mapping[str, Mapping[str, str]] | None = None,
    published: Sequence[str] | None = None,
) -> tuple[list[StagedDay], int | None]:
    """Merge `days` (consecutive, oldest first) onto `branch`, cut at the tag of the day before the first: a new
    day, a range, or a re-run of day D with every later published day after it. Days that can be merged at once
    are (`range_stage`: the range's changes folded and the state looked at once, then each day committed); else
    one after the other (`merge_into`). `changes_of(day)` gives a day's changes and events; `properties[day]` what
    the day's commits carry (the attempt that merges it); `published` the table's published days as the caller
    read them. Returns the staged days and the `main` head `publish_days` fences on."""
    expected_main = ods_store.cut(store, table, branch, predecessor(store, table, days[0], published))
    # The branch is cut, no day is merged onto it yet: where the fault tests kill a run mid-write.
    failpoint("mid_write")
    read = {day: changes_of(day) for day in days}
    if ods_store.exists(store, table) and range_stage.at_once(days, read):
        base = _state_before(store, table, branch, days[0])
        staged = range_stage.stage_range(
            store, table, branch, days, read, base, key_columns, shard_column, properties
        )
        return staged, expected_main
    staged = [
        merge_into(
            store,
            table,
            day,
            branch,
            read[day][0],
            key_columns,
            shard_column=shard_column,
            events=read[day][1],
            properties=(properties or {}).get(day),
        )
        for day in days
    ]
    return staged, expected_main


def publish(
    store: IcebergTables, table: str, branch: str, staged: Sequence[StagedDay], expected_main: int | None
) -> int:
    """Publish staged days: fence on `main`, move it to the branch, tag every day (`ods_store.publish_days`)."""
    return ods_store.publish_days(store, table, branch, {s.day: s.heads for s in staged}, expected_main)
