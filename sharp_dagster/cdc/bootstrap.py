"""The snapshot bootstrap of a live source: its ODS starting state and the binlog position the collector starts at.

For each configured database, one job-log run `cdc_bootstrap/<database>` (a daily period: the bootstrap's day):
1. step `position`: the GTID and binlog file + position (`snapshot.read_binlog_position`), recorded in the step's
   output as JSON `{"gtid": ..., "binlog_file": ..., "binlog_pos": ..., "binlog_seq": ..., "start": ...}`; that is
   where the collector must start (`cdc collect --start <gtid>`, or `<file>:<pos>` on MySQL), and
   `bootstrap_position(job_log, database)` reads it back from any machine that reaches the job log;
2. one step `snapshot/<table>` per table: every shard read over JDBC (in key ranges when large), stamped with the
   position, written as the state partition of the day before the start (`ods_state.<table>`, dt = start - 1);
   unsharded tables lose the `source_table` column the snapshot adds.
The start is the server's UTC day when the position was read: the first day the ODS merges, since every change
after the position lands on or after it. `cdc bootstrap` then writes it into the source YAML (`start:`), which
is where the CDC assets' first partition comes from.

A database bootstrapped already (a successful run in the job log) is refused unless `force`: a new snapshot
restarts the source at the new day and the collector at the new position.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, timedelta

from sharp_dagster.cdc.config import DatabaseConfig, MysqlSettings, SourceConfig, TableConfig
from sharp_dagster.cdc.merge import initial_state
from sharp_dagster.cdc.snapshot import (
    BinlogPosition,
    connect,
    read_binlog_position,
    snapshot_table,
)
from sharp_dagster.spark.tables import TableRef
from sharp_dagster.warehouse.cdc_layout import SHARD_COLUMN, bootstrap_day

JOB_PREFIX = "cdc_bootstrap"
POSITION_STEP = "position"
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


def state_ref(table: str) -> TableRef:
    return TableRef("ods_state", table, ("dt",))


def bootstrap_position(jl, database: str) -> dict | None:
    """The position recorded by the last successful bootstrap of `database` (see the module docstring), or None."""
    for run in jl.recent_successes(job_name(database), limit=1):
        full = jl.get(run.job_id)
        for step in full.steps if full else ():
            if step.step_id == POSITION_STEP and step.output:
                return {**json.loads(step.output), "job_id": run.job_id}
    return None


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
) -> BootstrapResult:
    """Snapshot every table of `db` at one binlog position into its ODS starting state, as one job-log run."""
    previous = bootstrap_position(jl, db.name)
    if previous is not None and not force:
        raise BootstrapError(
            f"database {db.name} was bootstrapped already (start {previous.get('start')}, job {previous['job_id']}, "
            f"collector start {previous.get('gtid') or previous.get('binlog_file')}); pass --force to take a new "
            "snapshot (the ODS then starts again from its day)"
        )
    start = _server_day(mysql)
    with jl.run(job_name(db.name), _Day(start), run_id=None) as handle:
        with jl.step(handle, POSITION_STEP, source_type="mysql") as rec:
            position = read_binlog_position(mysql)
            rec.info(json.dumps(_position_record(position, start), sort_keys=True))
        result = BootstrapResult(db.name, handle.job_id, position, start)
        progress(
            f"{db.name}: binlog position {position.binlog_file}:{position.binlog_pos} gtid {position.gtid_pos}"
        )
        for table in db.tables:
            with jl.step(handle, f"snapshot/{table.name}", source_type="jdbc", target_type="iceberg") as rec:
                ranges = _key_ranges(mysql, db.name, table, partition_rows, max_partitions)
                rec.info(f"{len(table.shards) or 'all'} shard(s), each read in {ranges} key range(s)")
                rows = _snapshot_one(spark, store, mysql, db.name, table, position, start, ranges)
                rec.source_count = rec.target_count = result.rows[table.name] = rows
            progress(
                f"{db.name}.{table.name}: {rows} rows -> ods_state.{table.name} dt={bootstrap_day(start)}"
            )
    return result


def _snapshot_one(spark, store, mysql, database, table: TableConfig, position, start, ranges: int) -> int:
    snap = snapshot_table(spark, mysql, database, table, position=position, num_partitions=ranges)
    df = snap.df if table.sharded else snap.df.drop(SHARD_COLUMN)
    staged = store.write_partition(
        state_ref(table.name), {"dt": bootstrap_day(start)}, initial_state(df, position.binlog_seq)
    )
    return staged.row_count


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


def _server_day(mysql: MysqlSettings) -> str:
    """The server's UTC day: the binlog's event times are the server's clock."""
    conn = connect(mysql)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT UTC_DATE()")
            return cur.fetchone()[0].isoformat()
    finally:
        conn.close()


def _position_record(position: BinlogPosition, start: str) -> dict:
    return {
        "gtid": position.gtid_pos,
        "binlog_file": position.binlog_file,
        "binlog_pos": position.binlog_pos,
        "binlog_seq": str(position.binlog_seq),
        "start": start,
    }


def bootstrap_source(
    spark, store, jl, mysql: MysqlSettings, source: SourceConfig, **options
) -> list[BootstrapResult]:
    """`bootstrap_database` for each of the source's databases, in order."""
    return [bootstrap_database(spark, store, jl, mysql, db, **options) for db in source.databases]
