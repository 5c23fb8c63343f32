"""`cdc bootstrap --table db.t`: one table joins a running source (or is repaired) without stopping the capture.

One job-log run `cdc_bootstrap/<database>/<table>` (a daily period: the snapshot's day S), with the steps of a
database's bootstrap (`bootstrap.py`) for that one table: `position`, `snapshot/<table>`, `day_check`. The table's
snapshot is published as its ODS state of S - 1 (its tag), so its first merged day is S; every other table, its
published days and tags, the source YAML's `start:` and the collector's position are left as they are (the
database's own bootstrap, `cdc_bootstrap/<database>`, still says where a collector without a position starts).

Why it is consistent, with no lock on writers and capture running: the method is the database bootstrap's, for
one table. The binlog position P is read between two readings of the source's clock on one day S; the JDBC read
runs after P, without a lock, so it sees the table at P plus some changes committed after P. Every change after
P is in the binlog with its full row image (`binlog_row_image=FULL`) and a binlog sequence above P's, which the
snapshot rows carry: the merge of day S folds, per key, the day's changes over the snapshot by that sequence, so a
change the read saw already is applied again to the same image, a change it missed is applied, and a change from
before P (older than the snapshot) loses to the snapshot row. The result is the table at the end of S **provided
the collector captures the table from before P on and every change between P and the end of the read committed on
S**: the second is checked (`day_check`: a read crossing midnight is taken again on the new day), the first is
the order of operations: the YAML lists the table (`cdc init` re-run, `--apply`) and the collector has been
restarted with it (the collector reads its tables from the YAML when it starts; a running one does not reload
it) **before** `cdc bootstrap --table`. A change of the table the collector skipped before its restart is older
than P and so inside the snapshot.

That order is checked, not trusted (`check_collector_follows`): the collector records the tables it captures with
its resume position (`cdc_collector_position.follows`, written when it takes the row at start and on each save),
and the table's bootstrap is refused, before Spark and again right after P is read, when a collector position
exists for the source and its tables do not include this one (or were not recorded: a collector started before
they were). No position at all means no collector has run for the source yet: its first start reads the YAML,
which lists the table (checked above), from the database bootstrap's position (`cdc_bootstrap/<database>`),
which is before P, so the table is captured from before P on: allowed. The reverse order is safe too: a collector
restarted with the table resumes from its saved position, saved before that restart; the guard reads the row
(owner, fencing generation, tables) just before P and again just after, and refuses when it changed, so the
collector that holds it started before P and resumes from a position saved before P: every change after P is
captured. What the guard cannot see is a later restart with an older YAML (without the table): that loses the
table's changes like any table taken out of the YAML.

Refused, before Spark starts: a table the YAML does not list (re-run `cdc init`), a table the collector does not
follow yet (restart `cdc collect` with the YAML that lists it), a table the server lacks or has
without a primary key (the merge folds by key: add one), a table bootstrapped already (by its database's bootstrap
or its own) without `force`. With `force` (a repair): the table's published days from S - 1 on are replaced (rolled
back to the last published day before S - 1, then the new state tagged S - 1), days before stay tagged; days from
S on are merged again from the new snapshot by the usual daily runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from sharp_dagster.cdc.capture.collector_db import Followed, collector_follows
from sharp_dagster.cdc.capture.collector_state import CollectorError
from sharp_dagster.cdc.ods import store as ods_store
from sharp_dagster.cdc.ods.bootstrap import (
    ATTEMPTS,
    JOB_PREFIX,
    MAX_PARTITIONS,
    PARTITION_ROWS,
    POSITION_STEP,
    BootstrapError,
    BootstrapResult,
    CrossedMidnight,
    bootstrap_at,
    job_name,
    read_position_day,
)
from sharp_dagster.cdc.ods.snapshot import connect
from sharp_dagster.cdc.source.clock import Clock, SourceClock
from sharp_dagster.cdc.source.config import (
    DatabaseConfig,
    MysqlSettings,
    SourceConfig,
    TableConfig,
    snapshot_day,
)


def table_job_name(database: str, table: str) -> str:
    return f"{JOB_PREFIX}/{database}/{table}"


def configured_table(source: SourceConfig, qualified: str, where: str) -> tuple[DatabaseConfig, TableConfig]:
    """`db.table` of the source YAML (`where` names it), or the error saying how a table joins it."""
    database, dot, table = qualified.partition(".")
    if not dot or not database or not table:
        raise BootstrapError(f"--table {qualified!r}: expected <database>.<table>, as in shop.orders")
    names = [db.name for db in source.databases]
    if database not in names:
        raise BootstrapError(
            f"--table {qualified}: database {database} is not in {where} (it has {', '.join(names)})"
        )
    db = source.database(database)
    try:
        return db, db.table(table)
    except KeyError:
        raise BootstrapError(
            f"--table {qualified}: no table {table} in {where} (database {database} has "
            f"{', '.join(t.name for t in db.tables)}); a table new on the server joins the YAML first: re-run "
            "`sharp-dagster cdc init` (it proposes the new tables), apply it with --apply, restart `cdc collect`, "
            "then bootstrap the table"
        ) from None


def check_collector_follows(jl, source_id: str, db: DatabaseConfig, table: TableConfig) -> Followed | None:
    """Refused when the source's collector has a position but does not capture the table (see the module doc);
    else what it follows (None: no collector has run for the source yet)."""
    try:
        followed = collector_follows(jl.engine, source_id)
    except CollectorError as exc:
        raise BootstrapError(f"table {db.name}.{table.name}: {exc}") from None
    qualified = f"{db.name}.{table.name}"
    if followed is None or (followed.tables is not None and qualified in followed.tables):
        return followed
    what = (
        "did not record the tables it follows (it started before collectors recorded them)"
        if followed.tables is None
        else f"follows {len(followed.tables)} other table(s) of the YAML it started with, not this one"
    )
    raise BootstrapError(
        f"table {qualified}: the collector of source {source_id!r} (last started as {followed.owner}) {what}; a "
        f"running collector reads its tables from the YAML only when it starts, so the table's changes after the "
        f"snapshot's binlog position would be lost: restart `sharp-dagster cdc collect` with the YAML that lists "
        f"{qualified}, then run `cdc bootstrap --table {qualified}` again"
    )


def check_table_before_spark(
    jl, mysql: MysqlSettings, db: DatabaseConfig, table: TableConfig, force: bool, *, source_id: str
) -> None:
    """What refuses a table's bootstrap without Spark: bootstrapped already (without `force`), a table the server
    lacks, or has without a primary key, a table the source's collector does not follow yet."""
    if not force:
        done = _bootstrapped_by(jl, db.name, table.name)
        if done:
            raise BootstrapError(
                f"table {db.name}.{table.name} was bootstrapped already ({done}); pass --force to take a new "
                f"snapshot of it alone (a repair: its ODS days from the new snapshot's day on are replaced, "
                "older days and every other table stay as they are)"
            )
    conn = connect(mysql)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT t.table_name, COUNT(k.column_name) FROM information_schema.tables t "
                "LEFT JOIN information_schema.key_column_usage k ON k.table_schema = t.table_schema "
                "AND k.table_name = t.table_name AND k.constraint_name = 'PRIMARY' "
                "WHERE t.table_schema = %s AND t.table_type = 'BASE TABLE' GROUP BY t.table_name",
                (db.name,),
            )
            found = {name: keys for name, keys in cur.fetchall() if table.rule.matches(name)}
    finally:
        conn.close()
    if not found:
        raise BootstrapError(f"table {db.name}.{table.name}: not on {mysql.describe()} (no such table)")
    keyless = sorted(name for name, keys in found.items() if not keys)
    if keyless:
        raise BootstrapError(
            f"table {db.name}.{table.name}: {', '.join(keyless)} on {mysql.describe()} has no primary key; the "
            "daily merge folds changes by key: add one (ALTER TABLE ... ADD PRIMARY KEY (...)) and declare it in "
            "the YAML's primary_key, or leave the table out of the YAML"
        )
    # Last: the collector's restart is the step before this one.
    check_collector_follows(jl, source_id, db, table)


def _bootstrapped_by(jl, database: str, table: str) -> str | None:
    """Which successful bootstrap run snapshotted the table: its own, else its database's (which has a step
    `snapshot/<table>` when the table was in the YAML then); None when neither."""
    for job in (table_job_name(database, table), job_name(database)):
        for run in jl.recent_successes(job, limit=1):
            full = jl.get(run.job_id)
            steps = {s.step_id for s in full.steps} if full else set()
            if POSITION_STEP in steps and (job != job_name(database) or f"snapshot/{table}" in steps):
                return f"job {job}, run {run.job_id}, start {run.range_start}"
    return None


def bootstrap_table(
    spark,
    store,
    jl,
    mysql: MysqlSettings,
    db: DatabaseConfig,
    table: TableConfig,
    force: bool = False,
    partition_rows: int = PARTITION_ROWS,
    max_partitions: int = MAX_PARTITIONS,
    progress: Callable[[str], None] = lambda line: None,
    clock: Clock | None = None,
    *,
    source_id: str,
) -> BootstrapResult:
    """Snapshot `table` of `db` (of source `source_id`) alone at a binlog position into its ODS starting state
    (see the module doc)."""
    check_table_before_spark(jl, mysql, db, table, force, source_id=source_id)
    clock = clock or SourceClock(mysql.pymysql_kwargs(), mysql.describe())
    one = replace(db, tables=(table,))
    job = table_job_name(db.name, table.name)
    for _ in range(ATTEMPTS):
        seen = check_collector_follows(jl, source_id, db, table)
        position, start = read_position_day(mysql, clock)
        if check_collector_follows(jl, source_id, db, table) != seen:
            raise BootstrapError(
                f"table {db.name}.{table.name}: the collector of source {source_id!r} restarted while the snapshot's "
                "binlog position was read (it may resume after it); run `cdc bootstrap --table` again"
            )
        _make_room(store, db.name, table.name, snapshot_day(start), force, progress)
        try:
            options = (partition_rows, max_partitions, progress)
            return bootstrap_at(spark, store, jl, mysql, one, position, start, None, clock, options, job=job)
        except CrossedMidnight as exc:
            progress(f"{db.name}.{table.name}: {exc}; taking the snapshot again")
    raise BootstrapError(
        f"table {db.name}.{table.name}: the snapshot read crossed midnight {ATTEMPTS} times; read it in more key "
        "ranges (--partition-rows)"
    )


def _make_room(store, database: str, table: str, day: str, force: bool, progress) -> None:
    """The table's published days: refused without `force` (bootstrapped already); with it, those after `day`
    (the new state's tag) are dropped: rolled back to the last day up to `day` (older tags kept)."""
    published = ods_store.published_days(store, table) if ods_store.exists(store, table) else []
    if not published:
        return
    if not force:
        raise BootstrapError(
            f"ods.{table} has published days ({published[0]} .. {published[-1]}): table {database}.{table} was "
            "bootstrapped already; pass --force to take a new snapshot of it alone (a repair)"
        )
    later = [d for d in published if d > day]  # a state of `day` itself is replaced by `write_state`
    if not later:
        return
    keep = [d for d in published if d <= day]
    if not keep:
        raise BootstrapError(
            f"ods.{table}: every published day ({', '.join(later)}) is after the new snapshot's day {day}: "
            "nothing older to keep; drop the table's ODS tables to start it again"
        )
    dropped = ods_store.rollback_to_day(store, table, keep[-1])
    progress(
        f"ods.{table}: rolled back to {keep[-1]}; days {', '.join(dropped)} are merged again after {day}"
    )
