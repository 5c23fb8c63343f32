"""The snapshot bootstrap of a live source: its ODS starting state and the binlog position the collector starts at.

For each configured database, one job-log run `cdc_bootstrap/<database>` (a daily period: the bootstrap's day):
1. step `position`: the GTID and binlog file + position (`snapshot.read_binlog_position`), recorded in the step's
   output as JSON `{"gtid": ..., "binlog_file": ..., "binlog_pos": ..., "binlog_seq": ..., "start": ...}` (and,
   after `force`, `"replaces"`: the job and start of the bootstrap it supersedes); that is where the collector
   starts (`cdc collect` reads it with `bootstrap_position(job_log, database)` from any machine that reaches the
   job log, when neither `--start` nor a saved collector position says otherwise);
2. one step `snapshot/<table>` per table: every shard read over JDBC (in key ranges when large), stamped with the
   position, published as the ODS state of the day before the start (`ods.<table>` and its tombstones
   `ods_state.<table>`, tagged start - 1: `ods_merge.write_state`); unsharded tables lose the `source_table`
   column the snapshot adds. A state of that day it replaces (after `force`) is named in the step's output with
   its row count; when later days were merged already the table is refused (roll it back first);
3. step `day_check`: the source's clock once every table is read, still on the start day.

The start day. The first merged day S takes the snapshot as the state at the end of S - 1 and applies every change
after the position whose transaction committed on S. The JDBC read runs on connections of its own (one per shard
and key range, opened by Spark's executors), so it cannot share one consistent view with the connection that
reads the position: MariaDB's `START TRANSACTION WITH CONSISTENT SNAPSHOT` + `binlog_snapshot_file/pos` is
consistent only for that one connection, and a `FLUSH TABLES WITH READ LOCK` held over the whole read would stop
every writer of the server for as long as the read takes (and needs RELOAD). So the read sees the position's state
plus changes made after it; the merge applies those again over the snapshot (each carries its full row image and
the snapshot rows carry the position's binlog_seq), which converges to the source at the end of S **provided every
change between the position and the end of the read committed on S**: one committed after midnight would already
be in S's state, a day early. Hence the day is taken from the source's clock (`clock`, the server's by default)
read just before and just after the position (both readings on one day: the position is on that day, with no lock
held at all), and read again after the last table (`day_check`): when midnight passed during the read, the run
fails (the job log says why) and the whole snapshot is taken again at once, now wholly on the new day. A short
lock window would make the position and one clock reading simultaneous, but would not save the check after the
read, which is what a midnight in the snapshot needs.

The start is written into the source YAML (`start:`) by `cdc bootstrap`, which is where the CDC assets' first
partition comes from. A database bootstrapped already (a successful run in the job log) is refused unless
`force`: a new snapshot restarts the source at the new day and the collector at the new position.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta

import pymysql

from sharp_dagster.cdc.merge.fold import initial_state, merge_key
from sharp_dagster.cdc.ods import store as ods_store
from sharp_dagster.cdc.ods.merge import write_state
from sharp_dagster.cdc.ods.snapshot import (
    BinlogPosition,
    connect,
    read_binlog_position,
    snapshot_table,
)
from sharp_dagster.cdc.source.clock import Clock, ClockError, SourceClock
from sharp_dagster.cdc.source.config import (
    DatabaseConfig,
    MysqlSettings,
    SourceConfig,
    TableConfig,
    snapshot_day,
)
from sharp_dagster.cdc.source.shards import PHYSICAL_TABLE_COLUMN
from sharp_dagster.spark.wap import snapshot_properties

JOB_PREFIX = "cdc_bootstrap"
POSITION_STEP = "position"
DAY_CHECK_STEP = "day_check"
ATTEMPTS = (
    2  # a read crossing midnight is taken again at once, just after it: crossing again means it takes a day
)
PARTITION_ROWS = 1_000_000  # rows per JDBC key range of a large table
MAX_PARTITIONS = 16


class BootstrapError(RuntimeError):
    """The bootstrap is refused or cannot run; the message says why and what to do."""


@dataclass(frozen=True)
class _Day:
    """The job-log period of a bootstrap: its day."""

    day: str

    @property
    def range_start(self) -> str:
        return self.day

    @property
    def range_end(self) -> str:
        return (date.fromisoformat(self.day) + timedelta(days=1)).isoformat()

    @property
    def period_minutes(self) -> int:
        return 1440


@dataclass
class BootstrapResult:
    database: str
    job_id: str
    position: BinlogPosition
    start: str
    rows: dict[str, int] = field(default_factory=dict)  # logical table -> snapshot rows

    @property
    def collector_start(self) -> str:
        """What `cdc collect --start` takes: the GTID position, else `file:pos`."""
        return self.position.gtid_pos or f"{self.position.binlog_file}:{self.position.binlog_pos}"


def job_name(database: str) -> str:
    return f"{JOB_PREFIX}/{database}"


def bootstrap_position(jl, database: str) -> dict | None:
    """The position recorded by the last successful bootstrap of `database` (see the module docstring), or None."""
    for run in jl.recent_successes(job_name(database), limit=1):
        full = jl.get(run.job_id)
        for step in full.steps if full else ():
            if step.step_id == POSITION_STEP and step.output:
                return {**json.loads(step.output), "job_id": run.job_id}
    return None


def collector_start(jl, databases: list[str]) -> tuple[str | None, str]:
    """Where `cdc collect` starts when neither `--start` nor a saved collector position says: the earliest of the
    databases' bootstrap positions (the collector reads them all from one stream; a change before a database's own
    position is older than its snapshot and changes nothing), and why. None ("earliest") when a database has no
    bootstrap: without a snapshot it needs the binlog from its beginning."""
    found = {name: bootstrap_position(jl, name) for name in databases}
    missing = [name for name, position in found.items() if position is None]
    if missing:
        return None, f"no bootstrap in the job log for {', '.join(missing)}"
    name, first = min(found.items(), key=lambda item: int(item[1]["binlog_seq"]))
    start = first["gtid"] or f"{first['binlog_file']}:{first['binlog_pos']}"
    return start, f"the bootstrap of {name} (job {first['job_id']}, start {first['start']})"


def bootstrap_database(
    spark,
    store,
    jl,
    mysql: MysqlSettings,
    db: DatabaseConfig,
    force: bool = False,
    partition_rows: int = PARTITION_ROWS,
    max_partitions: int = MAX_PARTITIONS,
    progress: Callable[[str], None] = lambda line: None,
    clock: Clock | None = None,
) -> BootstrapResult:
    """Snapshot every table of `db` at one binlog position into its ODS starting state, as one job-log run.

    `clock` is the source's clock in epoch milliseconds (`source_clock.SourceClock`, the server's `NOW()` less a
    replica's lag, by default); the start day is read from it (see the module docstring).
    """
    previous = _refuse_second(jl, db.name, force)
    clock = clock or SourceClock(mysql.pymysql_kwargs(), mysql.describe())
    options = (partition_rows, max_partitions, progress)
    for _ in range(ATTEMPTS):
        position, start = read_position_day(mysql, clock)
        try:
            return bootstrap_at(spark, store, jl, mysql, db, position, start, previous, clock, options)
        except CrossedMidnight as exc:
            progress(f"{db.name}: {exc}; taking the snapshot again")
    raise BootstrapError(
        f"database {db.name}: the snapshot read crossed midnight {ATTEMPTS} times (it takes longer than a day); "
        "read larger tables in more key ranges (--partition-rows) or bootstrap the databases one by one"
    )


class CrossedMidnight(RuntimeError):
    """The snapshot read ended on a later day than its position: its state mixes two days."""


def bootstrap_at(
    spark, store, jl, mysql, db, position, start, previous, clock, options, job: str | None = None
) -> BootstrapResult:
    partition_rows, max_partitions, progress = options
    _refuse_merged_days(store, db, start)
    with jl.run(job or job_name(db.name), _Day(start), run_id=None) as handle:
        with jl.step(handle, POSITION_STEP, source_type="mysql") as rec:
            rec.info(json.dumps(_position_record(position, start, previous), sort_keys=True))
        result = BootstrapResult(db.name, handle.job_id, position, start)
        progress(
            f"{db.name}: binlog position {position.binlog_file}:{position.binlog_pos} gtid {position.gtid_pos}"
        )
        for table in db.tables:
            with jl.step(handle, f"snapshot/{table.name}", source_type="jdbc", target_type="iceberg") as rec:
                ranges = _key_ranges(mysql, db.name, table, partition_rows, max_partitions)
                rec.info(f"{len(table.shards) or 'all'} shard(s), each read in {ranges} key range(s)")
                replaced = _existing_rows(store, table.name, snapshot_day(start))
                if replaced is not None:
                    rec.info(f"replaces ods.{table.name} {snapshot_day(start)} ({replaced} rows)")
                rows = _snapshot_one(spark, store, mysql, db.name, table, position, start, ranges, handle)
                rec.source_count = rec.target_count = result.rows[table.name] = rows
            progress(
                f"{db.name}.{table.name}: {rows} rows -> ods.{table.name} VERSION AS OF '{snapshot_day(start)}'"
            )
        with jl.step(handle, DAY_CHECK_STEP, source_type="mysql") as rec:
            ended = _day_of(_read_clock(clock, mysql))
            if ended != start:
                raise CrossedMidnight(
                    f"the snapshot read began on {start} and ended on {ended}: changes committed after midnight "
                    f"are in the state of {snapshot_day(start)}"
                )
            rec.info(f"the read ended on {ended}, the start day")
    return result


def read_position_day(mysql: MysqlSettings, clock: Clock) -> tuple[BinlogPosition, str]:
    """The binlog position and the source's UTC day it is on: the clock read before and after the position, again
    until both readings fall on one day (see the module docstring)."""
    for _ in range(ATTEMPTS):
        before = _day_of(_read_clock(clock, mysql))
        position = read_binlog_position(mysql)
        after = _day_of(_read_clock(clock, mysql))
        if before == after:
            return position, before
    raise BootstrapError(f"{mysql.describe()}: the source's clock kept crossing midnight around the position")


def _read_clock(clock: Clock, mysql: MysqlSettings) -> int:
    try:
        now_ms = clock()
    except ClockError as exc:
        raise BootstrapError(str(exc)) from None
    if now_ms is None:
        raise BootstrapError(
            f"{mysql.describe()}: a replica whose replication is stopped: how far its binlog has got is unknown; "
            "start its replication or bootstrap from the primary"
        )
    return now_ms


def _day_of(epoch_ms: int) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).date().isoformat()


def _existing_rows(store, table: str, day: str) -> int | None:
    """The live rows of the published state of `day` a snapshot is about to replace, or None when there is none."""
    if day not in ods_store.published_days(store, table):
        return None
    return ods_store.read_version(store, table, day).count()


def _refuse_merged_days(store, db: DatabaseConfig, start: str) -> None:
    """A new starting state of `start` - 1 under days merged from the old one would leave them wrong: refused for
    every table before anything is read or written (`write_state` refuses it too)."""
    day = snapshot_day(start)
    for table in db.tables:
        later = [d for d in ods_store.published_days(store, table.name) if d > day]
        if later:
            raise BootstrapError(
                f"ods.{table.name} has days merged after {day} ({', '.join(later)}): a new snapshot would leave "
                f"them merged from the old one; roll ods.{table.name} back to {day} first (sharp-dagster table "
                "rollback)"
            )


def _snapshot_one(
    spark, store, mysql, database, table: TableConfig, position, start, ranges: int, handle
) -> int:
    snap = snapshot_table(spark, mysql, database, table, position=position, num_partitions=ranges)
    df = snap.df if table.sharded else snap.df.drop(PHYSICAL_TABLE_COLUMN)
    shard = PHYSICAL_TABLE_COLUMN if table.sharded else None
    keys = merge_key(table.primary_key, shard_column=shard, business_key=table.business_key)
    state = initial_state(df, position.binlog_seq)
    # The commits name the bootstrap's attempt, as every log-driven write's do (`table history`).
    who = {
        "job_id": handle.job_id,
        "job_name": handle.job_name,
        "day": snapshot_day(start),
    }
    return write_state(
        store,
        table.name,
        snapshot_day(start),
        state,
        keys,
        shard,
        snapshot_properties(str(handle.token), who),
    )


def _key_ranges(
    mysql: MysqlSettings, database: str, table: TableConfig, partition_rows: int, cap: int
) -> int:
    """How many JDBC key ranges to read each shard in: one per `partition_rows` rows of its largest shard
    (information_schema's estimate), when its first primary-key column is an integer; else 1."""
    conn = connect(mysql)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT t.table_name, t.table_rows, c.data_type FROM information_schema.tables t "
                "JOIN information_schema.columns c ON c.table_schema = t.table_schema AND c.table_name = t.table_name "
                "WHERE t.table_schema = %s AND c.column_name = %s",
                (database, table.primary_key[0]),
            )
            found = [
                (name, rows or 0, kind) for name, rows, kind in cur.fetchall() if table.rule.matches(name)
            ]
    finally:
        conn.close()
    integer = {"tinyint", "smallint", "mediumint", "int", "bigint"}
    if not found or any(str(kind).lower() not in integer for _, _, kind in found):
        return 1
    largest = max(rows for _, rows, _ in found)
    return max(1, min(cap, math.ceil(largest / max(1, partition_rows))))


def _position_record(position: BinlogPosition, start: str, previous: dict | None) -> dict:
    replaces = (
        {"replaces": {"job_id": previous["job_id"], "start": previous.get("start")}} if previous else {}
    )
    return {
        **replaces,
        "gtid": position.gtid_pos,
        "binlog_file": position.binlog_file,
        "binlog_pos": position.binlog_pos,
        "binlog_seq": str(position.binlog_seq),
        "start": start,
    }


def check_before_spark(jl, mysql: MysqlSettings, source: SourceConfig, force: bool = False) -> None:
    """What refuses a bootstrap without Spark, checked before the command starts it (20 s and more): a database
    bootstrapped already (without `force`), and a server that does not take the connection (a wrong password)."""
    for db in source.databases:
        _refuse_second(jl, db.name, force)
    try:
        pymysql.connect(**mysql.pymysql_kwargs(), connect_timeout=10).close()
    except pymysql.MySQLError as exc:
        raise BootstrapError(f"cannot connect to {mysql.describe()}: {exc}") from None


def _refuse_second(jl, database: str, force: bool) -> dict | None:
    previous = bootstrap_position(jl, database)
    if previous is not None and not force:
        raise BootstrapError(
            f"database {database} was bootstrapped already (start {previous.get('start')}, job "
            f"{previous['job_id']}, collector start {previous.get('gtid') or previous.get('binlog_file')}); pass "
            "--force to take a new snapshot (the ODS then starts again from its day)"
        )
    return previous


def bootstrap_source(
    spark, store, jl, mysql: MysqlSettings, source: SourceConfig, **options
) -> list[BootstrapResult]:
    """`bootstrap_database` for each of the source's databases, in order."""
    return [bootstrap_database(spark, store, jl, mysql, db, **options) for db in source.databases]
