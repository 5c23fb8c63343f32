"""Migration of an ODS table from the `dt`-partitioned layout to the current state with a tag per day (issue 33).

The old layout: `ods_state.<table>` (every day's full state, tombstones included, partitioned by `dt`) and
`ods.<table>` (every day's live rows, partitioned by `dt`). The new one (`ods_versions`): `ods.<table>` the live
rows with `_binlog_seq`, `ods_state.<table>` the tombstones (key columns, the shard column when not in the key,
`_binlog_seq`), both unpartitioned, merge-on-read, with one tag per day named by `ods_versions.day_tag`.

How (`migrate_table`): the new tables are built under temporary names (`<table>__migrating`) by replaying the old
partitions oldest first: the first is appended, each later one is written as its difference from the one before
(deletes of the rows that left or changed, appends of the rows that came: `apply_day`), so the tags share files
as a published day's would; each day gets its tag, and the tag is checked against the old partitions (row count
and an order-free hash of every row, `fingerprint`) before the next day. Only when every day checks out are the
tables swapped by catalog renames: the old ones keep their data under `<table>__dt_layout` (drop them once the
new layout has served), and a failed rename puts back the ones done. Anything that fails before the swap leaves
the old tables as they were (the temporary tables are dropped). A second run is refused: the old layout is gone.

A column the old table gained on a later day (an `ALTER TABLE ... ADD COLUMN` the merge applied) gets the table
property the new layout's merge sets when a day adds one (`ods_merge.COLUMN_SINCE`: a re-run of an earlier day
then leaves it out of its base and adds it again with its default). The day is read from the old table's schema
history (`column_since`): the oldest snapshot of its `main` whose schema holds the column, and the `dt` partition
that snapshot wrote.

Nothing here imports Dagster; the command is `sharp-dagster ods migrate` (`cli/ods.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import reduce

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sharp_dagster.cdc.merge.result import DELETED_COLUMN, SEQ_COLUMN
from sharp_dagster.cdc.ods.merge import COLUMN_SINCE
from sharp_dagster.cdc.ods.versions import (
    ODS_DATABASE,
    ODS_TABLE_PROPERTIES,
    TOMBSTONE_DATABASE,
    day_tag,
    is_day_tag,
)
from sharp_dagster.spark import refs
from sharp_dagster.spark.checkpoint import checkpoint
from sharp_dagster.spark.java import jvm
from sharp_dagster.spark.tables import TableRef

NEW_SUFFIX = "__migrating"
BACKUP_SUFFIX = "__dt_layout"


class MigrationRefused(ValueError):
    """The table cannot be migrated as it is (named in the message); nothing was changed."""


@dataclass
class Migration:
    table: str
    days: list[str] = field(default_factory=list)
    live_rows: int = 0
    tombstones: int = 0
    backups: list[str] = field(default_factory=list)
    column_since: dict[str, str] = field(default_factory=dict)  # a column added after the first day: its day


def fingerprint(df: DataFrame, columns: Sequence[str]) -> tuple[int, int]:
    """(rows, sum of a 64-bit hash of each row): equal for equal multisets of rows, whatever their order."""
    cols = [F.col(f"`{c}`") for c in columns]
    row = df.select(
        F.count(F.lit(1)).alias("n"),
        F.coalesce(F.sum(F.xxhash64(*cols).cast("decimal(38,0)")), F.lit(0)).alias("h"),
    ).first()
    return int(row["n"]), int(row["h"])


def _same_row(left: DataFrame, right: DataFrame, columns: Sequence[str]):
    return reduce(lambda a, b: a & b, [left[f"`{c}`"].eqNullSafe(right[f"`{c}`"]) for c in columns])


def apply_day(store, ref: TableRef, before: DataFrame | None, after: DataFrame) -> None:
    """Make `main` of `ref` (holding `before`) hold `after`: delete every row whose content left or lost a copy,
    then append `after`'s rows of those contents and its new rows. Two commits, merge-on-read deletes."""
    name = store.name(ref)
    if before is None:
        after.writeTo(name).append()
        return
    cols = after.columns
    affected = checkpoint(before.exceptAll(after).distinct())
    if not affected.isEmpty():
        view = f"ods_migrate_affected_{ref.name}"
        affected.createOrReplaceTempView(view)
        match = " AND ".join(f"a.`{c}` <=> t.`{c}`" for c in cols)
        store.spark.sql(f"DELETE FROM {name} t WHERE EXISTS (SELECT 1 FROM {view} a WHERE {match})")
    back = after.join(affected, _same_row(after, affected, cols), "left_semi")
    added = after.exceptAll(before)
    new = added.join(affected, _same_row(added, affected, cols), "left_anti")
    rows = back.unionByName(new)
    if not rows.isEmpty():
        rows.writeTo(name).append()


def column_since(store, ref: TableRef, first_day: str) -> dict[str, str]:
    """The day each column of `ref` (a `dt`-partitioned table) first existed, for the columns added after
    `first_day`: walking `main`'s snapshots oldest first, the earliest `dt` written by the first snapshot whose
    schema holds the column (the write that added it; a snapshot that wrote no file, such as a partition emptied,
    says nothing and the next one is asked). When the oldest snapshots were expired, the columns the oldest one
    kept already has are taken as there from the start: their day is unknown, and the merge then keeps them as it
    did before the migration."""
    table = store.java_table(ref)
    ancestors = refs.main_ancestors(store, ref)
    schemas = table.schemas()
    since: dict[str, str] = {}
    if (
        ancestors and ancestors[0].parentId() is not None
    ):  # history expired: the first columns' days are unknown
        since = {name: first_day for name in _columns(schemas, ancestors[0])}
    for snapshot in ancestors:
        new = [name for name in _columns(schemas, snapshot) if name not in since]
        written = _days_written(store, table, snapshot) if new else []
        for name in new if written else []:
            since[name] = min(written)
    return {name: day for name, day in since.items() if day > first_day}


def _columns(schemas, snapshot) -> list[str]:
    schema_id = snapshot.schemaId()
    return [] if schema_id is None else [str(f.name()).lower() for f in schemas.get(schema_id).columns()]


def _days_written(store, table, snapshot) -> list[str]:
    """The `dt` values of the data files `snapshot` added."""
    value = jvm(store.spark).java.lang.Class.forName("java.lang.Object")
    days = set()
    files = snapshot.addedDataFiles(table.io()).iterator()  # a Java Iterable: Py4J iterates only its iterator
    while files.hasNext():
        data_file = files.next()
        fields = [str(f.name()) for f in table.specs().get(data_file.specId()).fields()]
        if "dt" in fields:
            days.add(str(data_file.partition().get(fields.index("dt"), value)))
    return sorted(days)


def _tag_head(store, ref: TableRef, day: str) -> None:
    refs.tag(store, ref, day_tag(day))  # at `main`'s head


def _create(
    store, ref: TableRef, schema: Sequence[tuple[str, str]], extra: dict[str, str] | None = None
) -> None:
    store.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {store.catalog}.{ref.database}")
    cols = ", ".join(f"`{c}` {t}" for c, t in schema)
    props = ", ".join(f"'{k}' = '{v}'" for k, v in {**ODS_TABLE_PROPERTIES, **(extra or {})}.items())
    store.spark.sql(f"CREATE TABLE {store.name(ref)} ({cols}) USING iceberg TBLPROPERTIES ({props})")
    refs.empty_snapshot(store, ref)  # a day with no rows still gets a tag


def _check_old_layout(store, state: TableRef, ods: TableRef, table: str) -> list[str]:
    """The days of the old layout, oldest first, or `MigrationRefused` saying why it cannot be migrated."""
    if not store.exists(state):
        raise MigrationRefused(f"{state.qualified} does not exist: no ODS table {table!r} to migrate")
    columns = store.spark.table(store.name(state)).columns
    if "dt" not in columns:
        tags = [n for n in refs.tags(store, state) if is_day_tag(n)]
        raise MigrationRefused(
            f"{state.qualified} is in the new layout already ({len(tags)} day tags, no dt column): nothing to migrate"
        )
    if DELETED_COLUMN not in columns or SEQ_COLUMN not in columns:
        raise MigrationRefused(
            f"{state.qualified} has no {SEQ_COLUMN}/{DELETED_COLUMN}: not an ODS state table"
        )
    for ref in (state, ods):
        backup = TableRef(ref.database, ref.name + BACKUP_SUFFIX, ())
        if store.exists(backup):
            raise MigrationRefused(
                f"{backup.qualified} exists (an earlier migration's backup): drop it before migrating again"
            )
    days = [p["dt"] for p in store.list_partitions(state)]
    if not days:
        raise MigrationRefused(f"{state.qualified} has no partitions: nothing to migrate")
    return days


def migrate_table(
    store,
    table: str,
    key_columns: Sequence[str],
    shard_column: str | None = None,
    progress: Callable[[str], None] = lambda _: None,
) -> Migration:
    """Migrate ODS table `table` (see the module's docstring). `MigrationRefused` before anything is written when
    the table is not in the old layout; any other failure leaves the old tables as they were."""
    old_state, old_ods = TableRef(TOMBSTONE_DATABASE, table, ("dt",)), TableRef(ODS_DATABASE, table, ("dt",))
    days = _check_old_layout(store, old_state, old_ods, table)
    new_ods, new_dead = (TableRef(db, table + NEW_SUFFIX, ()) for db in (ODS_DATABASE, TOMBSTONE_DATABASE))
    for ref in (new_ods, new_dead):
        store.drop_table(ref)  # what an interrupted run left: nothing reads these names
    schema = store.spark.table(store.name(old_state)).schema
    live_schema = [
        (f.name, f.dataType.simpleString()) for f in schema if f.name not in ("dt", DELETED_COLUMN)
    ]
    shard = [shard_column] if shard_column and shard_column not in key_columns else []
    dead_cols = [*key_columns, *shard, SEQ_COLUMN]
    types = dict(live_schema)
    missing = [c for c in dead_cols if c not in types]
    if missing:
        raise MigrationRefused(f"{old_state.qualified} has no key column(s) {missing}")
    result = Migration(table, column_since=column_since(store, old_state, min(days)))
    if result.column_since:
        added = ", ".join(f"{c} on {d}" for c, d in sorted(result.column_since.items()))
        progress(f"columns added after {min(days)}: {added} (table property {COLUMN_SINCE}<column>)")
    try:
        _create(
            store, new_ods, live_schema, {f"{COLUMN_SINCE}{c}": d for c, d in result.column_since.items()}
        )
        _create(store, new_dead, [(c, types[c]) for c in dead_cols])
        _replay(store, days, old_state, old_ods, new_ods, new_dead, dead_cols, result, progress)
        result.backups = _swap(store, [(old_ods, new_ods), (old_state, new_dead)])
    except BaseException:
        for ref in (new_ods, new_dead):
            store.drop_table(ref)
        raise
    return result


def _replay(store, days, old_state, old_ods, new_ods, new_dead, dead_cols, result, progress) -> None:
    """Each old day written into the new tables, tagged and checked against the old partitions."""
    old_days = {p["dt"] for p in store.list_partitions(old_ods)} if store.exists(old_ods) else set()
    previous: tuple[DataFrame, DataFrame] | None = None
    for day in days:
        part = checkpoint(store.read_partitions(old_state, [{"dt": day}]).drop("dt"))
        live = part.where(~F.col(DELETED_COLUMN)).drop(DELETED_COLUMN)
        dead = part.where(F.col(DELETED_COLUMN)).select(*[F.col(f"`{c}`") for c in dead_cols])
        for ref, before, after in (
            (new_ods, previous and previous[0], live),
            (new_dead, previous and previous[1], dead),
        ):
            apply_day(store, ref, before, after)
            _tag_head(store, ref, day)
        _verify(store, day, new_ods, live, live.columns)
        _verify(store, day, new_dead, dead, dead_cols)
        if day in old_days:  # what DWD read at dt = day: the tag without the bookkeeping column
            published = store.read_partitions(old_ods, [{"dt": day}]).drop("dt")
            _verify(store, day, new_ods, published, published.columns)
        result.days.append(day)
        progress(f"{day}: {fingerprint(live, live.columns)[0]} live rows, tagged {day_tag(day)}")
        previous = (live, dead)
    result.live_rows = store.spark.table(store.name(new_ods)).count()
    result.tombstones = store.spark.table(store.name(new_dead)).count()


def _verify(store, day: str, ref: TableRef, expected: DataFrame, columns: Sequence[str]) -> None:
    tagged = store.spark.sql(f"SELECT * FROM {store.name(ref)} VERSION AS OF '{day_tag(day)}'")
    got, want = fingerprint(tagged, columns), fingerprint(expected, columns)
    if got != want:
        raise RuntimeError(
            f"{ref.qualified} tag {day_tag(day)} does not read back day {day}: {got[0]} rows vs {want[0]} "
            "(or their contents differ); the old tables are unchanged"
        )


def _rename(store, ref: TableRef, to: str) -> None:
    store.spark.sql(f"ALTER TABLE {store.name(ref)} RENAME TO {ref.database}.{to}")


def _swap(store, pairs: list[tuple[TableRef, TableRef]]) -> list[str]:
    """Old -> `<name>__dt_layout`, new -> `<name>`, for each pair; on a failure the renames done are undone."""
    done: list[tuple[TableRef, str, str]] = []  # (database, from, to)
    try:
        for old, new in pairs:
            if store.exists(old):
                _rename(store, old, old.name + BACKUP_SUFFIX)
                done.append((old, old.name, old.name + BACKUP_SUFFIX))
            _rename(store, new, old.name)
            done.append((old, new.name, old.name))
    except BaseException:
        for old, src, dst in reversed(done):
            _rename(store, TableRef(old.database, dst, ()), src)
        raise
    return [f"{old.database}.{dst}" for old, _, dst in done if dst.endswith(BACKUP_SUFFIX)]
