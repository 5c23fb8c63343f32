"""Acceptance of issue 31: the ODS of every table on every day equals the source database at that day's end,
landed and merged through Dagster day by day, and, in a second warehouse, as one range backfill.

The source is the CDC session's real MariaDB (row binlog); the workload is `oracle_workload.build_plan(SEED)`:
three days of random inserts, updates, deletes, re-inserts, primary-key changes, moves between the shards of a
sharded table whose ids collide across shards, multi-row and rolled-back transactions, an `ALTER TABLE ... ADD
COLUMN` mid-day, transactions open across midnight that commit seconds, minutes and over an hour later (one rolls
back), a last day whose first hours are quiet, and rows unchanged since the snapshot holding odd DATETIME and DATE
values (year 1000, a Shanghai DST gap, 9999-12-31). The expected states are the source's own tables, read right
before the first statement at or after each midnight (`oracle_source.SourceRunner`): what had committed by then.

Both warehouses start from `cdc bootstrap` (`bootstrap_source`, what the command runs, in this process) taken at
00:00 of the first day, 2024-03-01: the source's own first day, not the warehouse's 2024-01-01; the YAML gets its
`start:` and the code location is loaded from it. Day by day, the clock stops 30 minutes after each midnight (past
the 15-minute lateness): the collector (in process, `once`) sends what has committed so far, the landing asset
runs, then the day's ODS assets, and the day's ODS is compared with the source; the transaction that commits at
01:05 is still open then. The range warehouse lands once, after the whole workload, and merges the three days in
one run, as a single-run backfill launches it.

The whole test runs with the machine's time zone set to Asia/Shanghai, in Python (`TZ`) and in the Spark JVM
(`TimeZone.setDefault`), as on a machine in China: nothing may depend on it.
Every difference is collected (path, day, table, rows) and reported together at the end.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from sharp_dagster.cdc.source.config import MysqlSettings, source_config_from_dict, write_start
from sharp_dagster_tests.cdc.oracle_pipeline import Warehouse, build_defs, collect
from sharp_dagster_tests.cdc.oracle_schema import (
    COLUMNS,
    DAYS,
    PHYSICAL,
    SNAPSHOT_DAY,
    at,
    midnight_after,
    source_yaml,
)
from sharp_dagster_tests.cdc.oracle_source import SourceRunner
from sharp_dagster_tests.cdc.oracle_workload import build_plan

pytestmark = pytest.mark.slow

SEED = 31
MACHINE_TZ = "Asia/Shanghai"
LATENESS = dt.timedelta(minutes=15)
KINDS = [
    "insert",
    "multi-row insert",
    "update",
    "multi-row update",
    "delete",
    "delete then re-insert",
    "primary-key change",
    "move between shards",
    "rolled back",
    "multi-statement transaction",
]
SPANNING = [
    "commits seconds after midnight",
    "commits minutes after midnight",
    "commits over an hour after midnight",
    "rolled back after midnight",
]


def ms(when: dt.datetime) -> int:
    return int(when.timestamp() * 1000)


@contextmanager
def timed(timings: dict[str, tuple[float, float]], step: str, spark):
    """Record the step's (wall, CPU) seconds: the CPU is what it costs on a quiet machine too."""
    start, cpu = time.monotonic(), cpu_seconds(spark)
    try:
        yield
    finally:
        timings[step] = (time.monotonic() - start, cpu_seconds(spark) - cpu)


def cpu_seconds(spark) -> float:
    """CPU time of this process and of Spark's JVM so far (Linux): what the test costs, however busy the machine."""
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return time.process_time() + (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


@contextmanager
def machine_time_zone(spark, zone: str):
    """This process's local time zone (Python's and the JVM's default) is `zone` for the block."""
    jvm = spark.sparkContext._jvm
    before_tz, before_jvm = os.environ.get("TZ"), jvm.java.util.TimeZone.getDefault()
    os.environ["TZ"] = zone
    time.tzset()
    jvm.java.util.TimeZone.setDefault(jvm.java.util.TimeZone.getTimeZone(zone))
    try:
        assert time.strftime("%z", time.localtime(0)) == "+0800"
        yield
    finally:
        jvm.java.util.TimeZone.setDefault(before_jvm)
        if before_tz is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = before_tz
        time.tzset()


def test_ods_equals_the_source_at_every_days_end_day_by_day_and_as_one_range(cdc, spark, tmp_path):
    timings: dict[str, tuple[float, float]] = {}
    t0, cpu0 = time.monotonic(), cpu_seconds(spark)
    plan = build_plan(SEED)
    # The workload holds what it claims, every day (a seed change cannot quietly drop a kind).
    for day in DAYS:
        assert all(plan.kinds[(day, k)] for k in KINDS), {k: plan.kinds[(day, k)] for k in KINDS}
        assert plan.shards_by_day[day] >= set(PHYSICAL["user_info"]), day
    assert all(plan.kinds[(day, k)] for day in (DAYS[0], DAYS[2]) for k in SPANNING)
    assert plan.kinds[(DAYS[1], "add column")] == 1
    assert min(e.at for e in plan.events if e.at >= at(DAYS[2], 0)) >= at(DAYS[2], 4), "day 3 starts quiet"

    database = cdc.new_database("oracle")
    config = source_yaml(database, f"binlog.{database}", lateness_minutes=LATENESS.seconds // 60)
    sql_dir = tmp_path / "sql"
    (sql_dir / "cdc").mkdir(parents=True)
    config_path = sql_dir / "cdc" / "oracle.yaml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    source = source_config_from_dict(config)
    cdc.sql(database, *[t.mysql_ddl(p) for t in source.databases[0].tables for p in t.shards])
    mysql = MysqlSettings(cdc.mariadb.host, cdc.mariadb.port, "root", "")
    kafka = cdc.broker.bootstrap_servers
    runner = SourceRunner(cdc.mariadb, database, plan)
    daily = Warehouse(spark, tmp_path / "daily", sql_dir, kafka)
    ranged = Warehouse(spark, tmp_path / "range", sql_dir, kafka)

    # The bootstrap's day comes from the source's clock, which is simulated per session here (`SET timestamp`):
    # so it is read from the simulation, as the collector's is.
    def source_clock() -> int:
        return int(runner.clock.timestamp() * 1000)

    problems: list[str] = []
    try:
        with machine_time_zone(spark, MACHINE_TZ):
            # ------------------------------------------------------------ the snapshot, `cdc bootstrap`
            runner.run_until(at(DAYS[0], 0))
            with timed(timings, "bootstrap", spark):
                (first,) = daily.bootstrap(mysql, source, source_clock)
                (second,) = ranged.bootstrap(mysql, source, source_clock)
            assert first.start == second.start == DAYS[0]
            assert first.rows == second.rows == {t: len(runner.states[SNAPSHOT_DAY][t][1]) for t in COLUMNS}
            write_start(config_path, first.start)  # as the command does: the source's first day
            defs = build_defs(sql_dir)
            daily.load(defs)
            ranged.load(defs)

            def run_collector(clock: dt.datetime):
                state = tmp_path / "collector.json"
                return collect(mysql, kafka, source, state, first.collector_start, ms(clock))

            # ------------------------------------------------------------ day by day
            for day in DAYS:
                clock = midnight_after(day) + 2 * LATENESS
                runner.run_until(clock)
                run_collector(clock)
                with timed(timings, f"{day} land", spark):
                    failed = daily.land(f"{day}-23:00")
                with timed(timings, f"{day} merge", spark):
                    failed = failed or daily.merge(day)
                if failed:
                    problems.append(f"day by day {day}: {failed}")
                with timed(timings, f"{day} compare", spark):
                    problems += daily.compare({day: runner.states[day]}, "day by day")

            # ------------------------------------------------------------ the rest, then one range backfill
            end = plan.events[-1].at + dt.timedelta(seconds=1)
            runner.run_until(end)
            assert runner.done
            run_collector(end + 2 * LATENESS)
            last_hour = (end + 2 * LATENESS).strftime("%Y-%m-%d-%H:00")
            with timed(timings, "range land", spark):
                failed = ranged.land((f"{DAYS[0]}-00:00", last_hour))
            with timed(timings, "range merge", spark):
                failed = failed or ranged.merge((DAYS[0], DAYS[-1]))
            if failed:
                problems.append(f"range {DAYS[0]}..{DAYS[-1]}: {failed}")
            with timed(timings, "range compare", spark):
                problems += ranged.compare({day: runner.states[day] for day in DAYS}, "range")
    finally:
        runner.close()
        daily.close()
        ranged.close()
        timings["total"] = (time.monotonic() - t0, cpu_seconds(spark) - cpu0)
        print("source oracle (wall s, cpu s):", {k: (round(w), round(c)) for k, (w, c) in timings.items()})

    # The source changed every table every day: equality with it says something about each day.
    previous = SNAPSHOT_DAY
    for day in DAYS:
        assert all(runner.states[day][t] != runner.states[previous][t] for t in COLUMNS), day
        previous = day
    assert "stock" in runner.states[DAYS[1]]["product"][0]
    assert "stock" not in runner.states[DAYS[0]]["product"][0]
    assert not problems, "ODS differs from the source:\n" + "\n".join(problems)
