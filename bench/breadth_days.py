"""The second half of `bench_breadth.py`: the breadth source's days through the pipeline, checked against the source.

On the source `bench_breadth.create_source` made and `cdc init` described: `cdc bootstrap` (the function the command
runs, in this process, its day read from a simulated source clock as the CDC end-to-end tests do: the server's own
clock is years past the simulated days), then for each simulated day a few changes to every table at times of that
day (`SET timestamp`), more to a few busy tables, and changes spread over every shard of `orders`; the source read at
the day's end; the collector up to the binlog's end (heartbeats past the day's lateness); the landing of every
database (one Dagster run, timed); the day's ODS of every table (`ods_day`, one Dagster run selecting every ODS
asset for the day, as main's `ods_daily_<source>` job does; timed, its Spark jobs counted in a job group of its own);
then the oracle: each day's ODS tag of every table equals the source at that day's end (the shards folded into the
logical `orders`, each row with its `source_table`).
"""

from __future__ import annotations

import datetime as dt
import json
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import yaml
from dagster import AssetKey

SNAPSHOT_DAY = dt.datetime(2024, 4, 30, tzinfo=dt.UTC)
LATENESS = dt.timedelta(minutes=15)  # the init's default `lateness_minutes`
SHARD_COLUMN = "source_table"  # the ODS column naming a row's shard (sharp_dagster.warehouse.cdc_layout)
DWD = "breadth_orders"  # a DWD table over two breadth tables: the shards' orders with t_000's row of the same id
DWD_SQL = """-- Breadth bench: every order of the shards with the plain table t_000's row of the same id, each day.
-- @partition: daily
-- @start: {start}
-- @deps: ods.orders, ods.t_000
SELECT
    o.source_table,
    o.id,
    o.amount,
    t.customer AS t_customer,
    t.note AS t_note
FROM ods.orders VERSION AS OF '${dt}' AS o
LEFT JOIN ods.t_000 VERSION AS OF '${dt}' AS t
    ON t.id = o.id
"""


def day_names(days: int) -> list[str]:
    return [(SNAPSHOT_DAY + dt.timedelta(days=d + 1)).date().isoformat() for d in range(days)]


def day_statements(
    layout: dict[str, list[str]], d: int, per_table: int, busy: int, busy_changes: int
) -> dict:
    """database -> [(hour, statement)] of day `d` (0-based): `per_table` changes to every plain table (an update of
    row 1, inserts, from the second day a delete), `busy_changes` more to the first `busy` tables (the same keys
    inserted, updated and deleted over and over), and two changes on every shard of `orders` (an update, an insert)."""
    out: dict[str, list[tuple[int, str]]] = {db: [] for db in layout}
    plain = [(db, t) for db, tables in layout.items() for t in tables if not t.startswith("orders_")]
    for n, (db, t) in enumerate(plain):
        hour = 1 + (n + d) % 22
        changes = [f"UPDATE {t} SET amount = amount + 1, note = 'day{d}' WHERE id = 1"]
        changes += [
            f"INSERT INTO {t} VALUES ({100 * (d + 1) + k}, 'n{d}', {d}.{k:02d}, 'new')" for k in range(9)
        ]
        if d:
            changes[1] = f"DELETE FROM {t} WHERE id = {100 * d}"  # a row the day before inserted
        out[db] += [(hour, sql) for sql in changes[: max(1, per_table)]]
    for db, t in plain[:busy]:
        for k in range(busy_changes):
            key, hour = 10_000 * (d + 1) + k % 7, 1 + k * 22 // busy_changes
            step = k // 7 % 3  # each key: insert, update, delete, insert, ...
            sql = (
                f"INSERT INTO {t} VALUES ({key}, 'busy', {k}.00, 'd{d}')",
                f"UPDATE {t} SET amount = {k}.25, note = 'u{k}' WHERE id = {key}",
                f"DELETE FROM {t} WHERE id = {key}",
            )[step]
            out[db].append((hour, sql))
    for db, tables in layout.items():
        shards = [t for t in tables if t.startswith("orders_")]
        for n, shard in enumerate(shards):
            hour = 1 + (n * 7 + d) % 22
            out[db].append(
                (hour, f"UPDATE {shard} SET amount = amount + {d + 1}, note = 'd{d}' WHERE id = {2}")
            )
            out[db].append((hour, f"INSERT INTO {shard} VALUES ({1000 + d}, 's{n}', {n}.{d}0, NULL)"))
    return out


def run_day(db, day: str, statements: dict[str, list[tuple[int, str]]]) -> int:
    """The day's statements, one transaction per database and hour, at HH:05 of the source's clock."""
    base = dt.datetime.fromisoformat(day).replace(tzinfo=dt.UTC)
    count = 0
    for database, items in statements.items():
        conn = db.connect(database)
        try:
            with conn.cursor() as cur:
                cur.execute("SET time_zone = '+00:00'")
                for hour in sorted({h for h, _ in items}):
                    when = base + dt.timedelta(hours=hour, minutes=5)
                    cur.execute("SET timestamp = %s", (int(when.timestamp()),))
                    cur.execute("BEGIN")
                    for h, sql in items:
                        if h == hour:
                            cur.execute(sql)
                            count += 1
                    cur.execute("COMMIT")
        finally:
            conn.close()
    return count


def read_source(db, layout: dict[str, list[str]]) -> dict:
    """logical table -> (columns, rows as text, sorted): the source now; the shards of `orders` in one statement,
    each row with its physical table as `source_table`."""
    from sharp_dagster_tests.cdc.source_support import sort_rows, text

    out = {}
    for database, tables in layout.items():
        conn = db.connect(database)
        try:
            with conn.cursor() as cur:
                shards = [t for t in tables if t.startswith("orders_")]
                queries = {t: f"SELECT * FROM `{t}`" for t in tables if t not in shards}
                if shards:
                    queries["orders"] = " UNION ALL ".join(
                        f"SELECT '{p}' AS `{SHARD_COLUMN}`, t.* FROM `{p}` t" for p in shards
                    )
                for table, query in queries.items():
                    cur.execute(query)
                    rows = [tuple(map(text, r)) for r in cur.fetchall()]
                    out[table] = ([d[0] for d in cur.description], sort_rows(rows))
        finally:
            conn.close()
    return out


@contextmanager
def spark_jobs(spark, group: str):
    """Counts the Spark jobs submitted in the block, in any thread (the ODS steps may run Spark in threads that do
    not inherit a job group): the job ids between two marker jobs of its own; yields a list, filled at the end."""
    counted: list[int] = []
    before = _marker_job(spark, f"{group}-before")
    yield counted
    counted.append(_marker_job(spark, f"{group}-after") - before - 1)


def _marker_job(spark, group: str) -> int:
    """The id of a one-task job run now (Spark numbers its jobs in submission order)."""
    sc = spark.sparkContext
    sc.setJobGroup(group, "bench_breadth marker")
    try:
        sc.parallelize([0], 1).count()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    return max(sc.statusTracker().getJobIdsForGroup(group))


def ods_day(warehouse, day: str) -> str | None:
    """The day's ODS of every table: one Dagster run selecting every ODS asset for the day's partition (what main's
    `ods_daily_<source>` job runs); its failure, or None. The one place to switch to a per-source-day job."""
    return warehouse.merge(day)


def land(warehouse, day: str) -> str | None:
    """Every database's landing asset for the day's last hour (which lands every closed hour before it too)."""
    return warehouse.land(f"{day}-23:00")


def pipeline(args, tmp: Path, db, broker, spark, layout: dict[str, list[str]], yaml_path: Path) -> dict:
    """Bootstrap, then `args.days` days of changes, collector, landing, ODS and the oracle (see the module doc)."""
    from sharp_dagster.cdc.source.config import MysqlSettings, source_config_from_dict, write_start
    from sharp_dagster_tests.cdc.oracle_pipeline import Warehouse, build_defs, collect

    sql_dir = tmp / "days_sql"
    (sql_dir / "cdc").mkdir(parents=True)
    (sql_dir / "dwd").mkdir()
    days = day_names(args.days)
    (sql_dir / "dwd" / f"{DWD}.sql").write_text(DWD_SQL.replace("{start}", days[0]))
    config_path = sql_dir / "cdc" / yaml_path.name
    config_path.write_text(yaml_path.read_text())
    source = source_config_from_dict(yaml.safe_load(config_path.read_text()))
    mysql = MysqlSettings(db.host, db.port, "root", "")
    warehouse = Warehouse(spark, tmp / "days", sql_dir, broker.bootstrap_servers)
    out: dict = {"days": {}, "problems": []}
    try:
        clock_at = dt.datetime.fromisoformat(days[0]).replace(tzinfo=dt.UTC)
        t0 = time.perf_counter()
        results = warehouse.bootstrap(mysql, source, lambda: _ms(clock_at))
        out["bootstrap_s"] = round(time.perf_counter() - t0, 2)
        print(json.dumps({"bootstrap_s": out["bootstrap_s"]}), file=sys.stderr, flush=True)
        start = min(r.start for r in results)
        assert start == days[0], f"the bootstrap's start {start} is not the first simulated day {days[0]}"
        write_start(config_path, start)
        t0 = time.perf_counter()
        warehouse.load(build_defs(sql_dir))
        out["defs_s"] = round(time.perf_counter() - t0, 2)
        collector_start = min(r.collector_start for r in results)
        states = {}
        for i, day in enumerate(days):
            statements = day_statements(layout, i, args.per_table, args.busy, args.busy_changes)
            figures: dict = {"statements": run_day(db, day, statements)}
            t0 = time.perf_counter()
            states[day] = read_source(db, layout)
            figures["source_s"] = round(time.perf_counter() - t0, 2)
            end = dt.datetime.fromisoformat(day).replace(tzinfo=dt.UTC) + dt.timedelta(days=1) + 2 * LATENESS
            t0 = time.perf_counter()
            stats = collect(
                mysql, broker.bootstrap_servers, source, tmp / "collector.json", collector_start, _ms(end)
            )
            figures |= {"collector_s": round(time.perf_counter() - t0, 2), "row_changes": stats.row_changes}
            figures |= pipeline_day(warehouse, spark, day, skip_landing=day in args.skip_landing)
            if not figures["failure"]:
                t0 = time.perf_counter()
                figures["failure"] = warehouse.run([AssetKey(["dwd", DWD])], day)
                figures["dwd_s"] = round(time.perf_counter() - t0, 2)
            out["days"][day] = figures
            print(json.dumps({day: figures}), file=sys.stderr, flush=True)  # a long run's progress
            if figures["failure"]:
                break
        t0 = time.perf_counter()
        out["problems"] = warehouse.compare(states, "breadth") + dwd_problems(warehouse, states)
        out["oracle_s"] = round(time.perf_counter() - t0, 2)
        out["tables"] = len(warehouse.ods_tables)
    finally:
        warehouse.close()
    return out


def pipeline_day(warehouse, spark, day: str, skip_landing: bool = False) -> dict:
    """The day's landing and ODS, timed; the ODS run's Spark jobs counted; per table-day figures."""
    figures: dict = {"landing_s": None, "failure": None}
    if not skip_landing:  # (--skip-landing DAY: the oracle must then fail: a day merged without its changes)
        t0 = time.perf_counter()
        figures["failure"] = land(warehouse, day)
        figures["landing_s"] = round(time.perf_counter() - t0, 2)
        if figures["failure"]:
            return figures
    t0 = time.perf_counter()
    with spark_jobs(spark, f"ods-{day}") as jobs:
        figures["failure"] = ods_day(warehouse, day)
    tables = len(warehouse.ods_tables)
    seconds = time.perf_counter() - t0
    figures |= {"ods_s": round(seconds, 2), "ods_spark_jobs": jobs[0], "ods_tables": tables}
    figures |= {
        "ods_s_per_table_day": round(seconds / tables, 3),
        "jobs_per_table_day": round(jobs[0] / tables, 1),
    }
    return figures


def _ms(when: dt.datetime) -> int:
    return int(when.timestamp() * 1000)


def dwd_problems(warehouse, states: dict) -> list[str]:
    """Where `dwd.breadth_orders` of a day differs from the join of the source's `orders` and `t_000` at the day's
    end (every day of `states`, rows as text)."""
    from sharp_dagster.spark.tables import TableRef
    from sharp_dagster_tests.cdc.source_support import sort_rows

    problems = []
    with warehouse.env():
        store = warehouse.store()
        for day, tables in states.items():
            columns, rows = tables["orders"]
            t_columns, t_rows = tables["t_000"]
            by_id = {r[t_columns.index("id")]: r for r in t_rows}
            pick = [columns.index(c) for c in (SHARD_COLUMN, "id", "amount")]
            tail = [t_columns.index(c) for c in ("customer", "note")]
            want = []
            for r in rows:
                t = by_id.get(r[pick[1]])
                want.append(tuple(r[i] for i in pick) + (tuple(t[i] for i in tail) if t else (None, None)))
            if not store.has_partition(TableRef("dwd", DWD), {"dt": day}):
                problems.append(f"{day} dwd.{DWD}: no partition")
                continue
            df = store.read_partitions(TableRef("dwd", DWD), [{"dt": day}], needed_by="bench_breadth")
            names = [SHARD_COLUMN, "id", "amount", "t_customer", "t_note"]
            got = [tuple(r) for r in df.selectExpr(*[f"CAST({c} AS string)" for c in names]).collect()]
            if sort_rows(got) != sort_rows(want):
                problems.append(f"{day} dwd.{DWD}: {len(got)} rows, the source's join has {len(want)}")
    return problems
