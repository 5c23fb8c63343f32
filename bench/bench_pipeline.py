"""Benchmark of the whole pipeline per asset-partition: a backfill of every asset over `--days` days of the demo.

What runs is the demo (`sharp_dagster/demo/run.py`) on the demo's generated shop (200 users): a real Apache Kafka
broker on loopback, the ODS states bootstrapped from the snapshot, then day by day the day's binlog replayed into
the topic, the hourly landing job and the daily warehouse job (4 ODS merges, 2 DWD, 2 ADS, their checks) executed
through Dagster's public API (`execute_in_process` against a real `DagsterInstance`), as `sharp-dagster demo` does.
Everything lives in a temporary folder; Spark runs on `local[2]`.

Where the time goes, measured without changing the product:

- **Dagster**: each run's event log (`instance.all_logs`) gives step start/end; the rest of a run's wall time is
  run set-up (before the first step: run record, resources, plan) and teardown (after the last step).
- **Spark jobs**: the SparkContext's status store (`statusStore().jobsList`) gives every job's submission and
  completion time; each job is put in the step, and in the probe below, running when it was submitted.
- **Probes**: the process's own calls to a few named functions are timed (exclusive time: a probe inside another
  is not counted twice), when those functions exist on disk: Iceberg table calls (stage, publish, append, ref
  commits, catalog refreshes and lookups, partition listings), the data-quality scans (`RuleRunner`), the IO
  manager's upstream loads, the landing (`land`) and its broker metadata calls, OpenLineage events, DataFrame
  `count()`/`collect()` called anywhere else, and every SQL statement through SQLAlchemy (job log vs Dagster's
  own storage, told apart by database). JVM round trips (Py4J commands) are counted per step.

Reported: seconds per asset-partition (wall of all runs / asset-partitions), per asset the median step seconds and
Spark jobs per partition, the share of every cost, and a findings list (the top costs with figures).

With `--backfill` the whole history is in the topic before anything runs (a backfill of past days): one landing
run over the range's hours (counted as one asset-partition per day, as above), then one run of every daily asset
over the range. With `--single-run` the days are landed one by one as before, then every daily asset runs over the whole range in
ONE Dagster run (the assets' single-run backfill policy: each asset takes its partitions oldest first), which shows
what amortising the run set-up gives; per-step seconds are then the step's time divided by its partitions.

    .venv/bin/python bench/bench_pipeline.py [--days 30] [--quick (= --days 2)] [--single-run | --backfill]
        [--users 200]
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

TARGET_S = 1.0

# (module, attribute path, category). Missing ones are skipped and listed in the output (the product moves on).
PROBES = [
    ("sharp_dagster.spark.iceberg", "IcebergTables.stage", "table write: stage on a branch (runs the query)"),
    ("sharp_dagster.spark.iceberg", "IcebergTables.append", "table write: append"),
    ("sharp_dagster.spark.iceberg", "IcebergTables.publish", "table commit: publish"),
    (
        "sharp_dagster.spark.iceberg",
        "IcebergTables.stage_range",
        "table write: a range on a branch (one write)",
    ),
    ("sharp_dagster.spark.iceberg", "IcebergTables.publish_range", "table commit: publish"),
    ("sharp_dagster.cdc.ods.stage", "stage", "merge: an ODS table's days onto a branch (merge-on-read)"),
    (
        "sharp_dagster.spark.iceberg",
        "IcebergTables.commit_refs",
        "table commit: ref commits (cut/pick/drop)",
    ),
    ("sharp_dagster.spark.iceberg", "IcebergTables._stage_empty", "table commit: empty-partition delete"),
    ("sharp_dagster.spark.iceberg", "IcebergTables.refresh", "catalog: refresh/load"),
    ("sharp_dagster.spark.iceberg", "IcebergTables.java_table", "catalog: refresh/load"),
    ("sharp_dagster.spark.iceberg", "IcebergTables.exists", "catalog: refresh/load"),
    ("sharp_dagster.spark.iceberg", "IcebergTables.ensure_table", "catalog: refresh/load"),
    ("sharp_dagster.spark.iceberg", "IcebergTables.list_partitions", "catalog: partition listing"),
    ("sharp_dagster.spark.iceberg", "IcebergTables.staged_branches", "catalog: partition listing"),
    (
        "sharp_dagster.spark.iceberg",
        "IcebergTables.drop_branches",
        "table commit: ref commits (cut/pick/drop)",
    ),
    ("sharp_dagster.spark.iceberg", "IcebergTables.history", "catalog: history"),
    ("sharp_dagster.spark.iceberg", "IcebergTables.write_partition", "table write: a partition on main"),
    ("sharp_dagster.spark.iceberg", "IcebergTables.has_partition", "catalog: partition listing"),
    ("sharp_dagster.publish.rules", "evaluate", "check scan (DQC rules)"),
    ("sharp_dagster.dqc.runner", "RuleRunner.run", "check scan (DQC rules)"),
    ("sharp_dagster.dqc.runner", "RuleRunner.run_many", "check scan (DQC rules)"),
    ("sharp_dagster.dqc.runner", "RuleRunner.run_range", "check scan (DQC rules)"),
    ("sharp_dagster.publish.rules", "evaluate_range", "check scan (DQC rules)"),
    ("sharp_dagster.resources.io_manager", "SparkTableIOManager.load_input", "upstream load (IO manager)"),
    ("sharp_dagster.cdc.landing.land", "land", "landing: Spark Kafka read, parse, write"),
    ("sharp_dagster.cdc.landing.kafka_source", "capture_end_offsets", "broker: metadata and offsets"),
    ("sharp_dagster.cdc.landing.kafka_source", "topic_partitions", "broker: metadata and offsets"),
    ("sharp_dagster.cdc.landing.done_markers", "write_done_markers", "landing: done markers"),
    ("sharp_dagster.cdc.merge.fold", "merge_day", "merge: plan (merge_day)"),
    ("sharp_dagster.lineage.openlineage", "emit_run_event", "openlineage events"),
    ("sharp_dagster.assets.lineage_runtime", "RuntimeLineageCheck.observe", "lineage check (analyzed plan)"),
    ("pyspark.sql.classic.dataframe", "DataFrame.count", "DataFrame.count()"),
    ("pyspark.sql.classic.dataframe", "DataFrame.collect", "DataFrame.collect()"),
    ("pyspark.sql.classic.dataframe", "DataFrame.first", "DataFrame.first()"),
    ("pyspark.sql.classic.dataframe", "DataFrame.isEmpty", "DataFrame.isEmpty()"),
    ("pyspark.sql.classic.dataframe", "DataFrame.toPandas", "DataFrame.toPandas()"),
]
# Categories named with the project's function that called them (which count() could come from a commit summary).
BY_CALLER = ("DataFrame.",)


def caller() -> str:
    """`module:function` of the innermost frame of the project (not pyspark, not this file)."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if "/sharp_dagster/" in name and "/pyspark/" not in name:
            return f"{name.split('/sharp_dagster/', 1)[1].removesuffix('.py')}:{frame.f_code.co_name}"
        frame = frame.f_back
    return "?"


class Probes:
    """Exclusive time per category of the main thread's probed calls, with every call's interval kept."""

    def __init__(self) -> None:
        self.main = threading.main_thread()
        self.stack: list[list] = []  # [category, start, child_time]
        self.calls: list[tuple[float, float, float, str, int]] = []  # start, end, exclusive, category, depth
        self.missing: list[str] = []
        self.py4j = 0  # Py4J commands sent (JVM round trips), any thread
        self.py4j_log: list[tuple[float, float]] = []  # (start, seconds) of each, to place them in steps
        self.paused = False

    def enter(self, category: str) -> bool:
        if self.paused or threading.current_thread() is not self.main:
            return False
        self.stack.append([category, time.time(), 0.0])
        return True

    def leave(self) -> None:
        category, start, child = self.stack.pop()
        end = time.time()
        self.calls.append((start, end, (end - start) - child, category, len(self.stack)))
        if self.stack:
            self.stack[-1][2] += end - start

    def wrap(self, fn, category: str):
        probes = self

        named = category.startswith(BY_CALLER)

        @functools.wraps(fn)
        def probed(*args, **kwargs):
            if not probes.enter(f"{category} in {caller()}" if named else category):
                return fn(*args, **kwargs)
            try:
                return fn(*args, **kwargs)
            finally:
                probes.leave()

        return probed

    def install(self) -> None:
        for module_name, path, category in PROBES:
            try:
                owner = importlib.import_module(module_name)
                *parents, attr = path.split(".")
                for p in parents:
                    owner = getattr(owner, p)
                fn = getattr(owner, attr)
            except (ImportError, AttributeError):
                self.missing.append(f"{module_name}.{path}")
                continue
            setattr(owner, attr, self.wrap(fn, category))
        self._install_py4j()
        self._install_sql()

    def _install_py4j(self) -> None:
        from py4j.java_gateway import GatewayClient

        original = GatewayClient.send_command
        probes = self

        def send_command(client, command, *args, **kwargs):
            if probes.paused:
                return original(client, command, *args, **kwargs)
            t0 = time.time()
            try:
                return original(client, command, *args, **kwargs)
            finally:
                probes.py4j += 1
                probes.py4j_log.append((t0, time.time() - t0))

        GatewayClient.send_command = send_command

    def _install_sql(self) -> None:
        """Every SQL statement through SQLAlchemy, as a probe named by the database it goes to."""
        from sqlalchemy import event
        from sqlalchemy.engine import Engine, make_url

        job_log_db = os.environ["SHARP_DATA_DIR"]
        dagster_home = os.environ["DAGSTER_HOME"]
        if os.environ.get("SHARP_LOG_DB_URL"):  # a deployment profile: the job log's own database
            job_log_db = f"/{make_url(os.environ['SHARP_LOG_DB_URL']).database}"
        dagster_pg = f"/{os.environ['DAGSTER_PG_DB']}" if os.environ.get("DAGSTER_PG_DB") else None

        def kind(conn) -> str:
            url = str(conn.engine.url)
            if dagster_home in url or (dagster_pg and url.endswith(dagster_pg)):
                return "Dagster storage SQL"
            return "job log SQL" if job_log_db in url else "other SQL"

        @event.listens_for(Engine, "before_cursor_execute")
        def before(conn, cursor, statement, parameters, context, executemany):
            conn.info.setdefault("_bench_probe", []).append(self.enter(kind(conn)))

        @event.listens_for(Engine, "after_cursor_execute")
        def after(conn, cursor, statement, parameters, context, executemany):
            if conn.info["_bench_probe"].pop():
                self.leave()

        # A commit is no cursor statement; on SQLite it is where the write reaches the disk.
        from sqlalchemy.engine.base import Connection

        commit = getattr(Connection, "_commit_impl", None)
        if commit is not None:

            def _commit_impl(conn, *args, **kwargs):
                if not self.enter(kind(conn)):
                    return commit(conn, *args, **kwargs)
                try:
                    return commit(conn, *args, **kwargs)
                finally:
                    self.leave()

            Connection._commit_impl = _commit_impl
        else:
            self.missing.append("sqlalchemy Connection._commit_impl (SQL commits not timed)")

        @event.listens_for(Engine, "handle_error")
        def failed(ctx):
            conn = ctx.connection
            if conn is not None and conn.info.get("_bench_probe") and conn.info["_bench_probe"].pop():
                self.leave()


def spark_jobs(spark) -> dict[int, tuple[float | None, float | None, str]]:
    """Every job the status store still holds: id -> (submitted, completed, status), epoch seconds."""
    store = spark.sparkContext._jsc.sc().statusStore()
    seq = store.jobsList(None)
    out = {}
    for i in range(seq.size()):
        job = seq.apply(i)
        sub, comp = job.submissionTime(), job.completionTime()
        out[int(job.jobId())] = (
            sub.get().getTime() / 1000 if sub.isDefined() else None,
            comp.get().getTime() / 1000 if comp.isDefined() else None,
            str(job.status().toString()),
        )
    return out


def step_windows(instance, run_id: str) -> list[tuple[str, float, float, int]]:
    """(step key, start, end, assets it materialized) of every step of a run, from its event log: a multi-asset's
    step (a source's ODS tables) counts each of its assets."""
    starts: dict[str, float] = {}
    out = []
    materialized: dict[str, set] = defaultdict(set)
    for entry in instance.all_logs(run_id):
        ev = entry.dagster_event
        if ev is None or not ev.step_key:
            continue
        kind = ev.event_type_value
        if kind == "STEP_START":
            starts[ev.step_key] = entry.timestamp
        elif kind == "ASSET_MATERIALIZATION":
            materialized[ev.step_key].add(ev.asset_key)
        elif kind in ("STEP_SUCCESS", "STEP_FAILURE", "STEP_SKIPPED") and ev.step_key in starts:
            out.append((ev.step_key, starts.pop(ev.step_key), entry.timestamp, False))
    return [(k, s, e, len(materialized[k])) for k, s, e, _ in out]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--quick", action="store_true", help="2 days: a smoke test of the benchmark")
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument(
        "--single-run",
        action="store_true",
        help="land day by day, then every daily asset over the whole range in ONE run (Dagster's single-run "
        "backfill) instead of one run per day",
    )
    parser.add_argument(
        "--backfill",
        action="store_true",
        help="the history is in Kafka before anything runs: every day replayed first, then ONE landing run over "
        "the range's hours and ONE run of every daily asset over the range (both single-run backfills)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder (printed)")
    parser.add_argument(
        "--profile-from-env",
        action="store_true",
        help="keep DAGSTER_HOME, SHARP_WAREHOUSE_DIR and SHARP_LOG_DB_URL of the environment (a deployment "
        "profile set up by the caller, see bench_profiles.py) instead of fresh embedded ones",
    )
    args = parser.parse_args(argv)
    args.single_run = args.single_run or args.backfill
    n_days = 2 if args.quick else args.days
    if n_days < 1:
        parser.error("--days must be at least 1")

    work = Path(tempfile.mkdtemp(prefix="bench_pipeline_"))
    os.environ["SHARP_DATA_DIR"] = str(work / "data")
    if not args.profile_from_env:
        os.environ["DAGSTER_HOME"] = str(work / "dagster_home")
    os.environ.setdefault("SHARP_SPARK_MASTER", "local[2]")
    # The status store keeps 1,000 jobs by default; a single run over 30 days starts several thousand.
    extra = "spark.ui.retainedJobs=1000000"
    os.environ["SHARP_SPARK_CONF"] = ",".join(c for c in (os.environ.get("SHARP_SPARK_CONF", ""), extra) if c)
    kept = ("SHARP_WAREHOUSE_DIR", "SHARP_LOG_DB_URL") if args.profile_from_env else ()
    for var in ("SHARP_WAREHOUSE_DIR", "SHARP_LOG_DB_URL", "SHARP_KAFKA_BOOTSTRAP"):
        if var not in kept:
            os.environ.pop(var, None)
    if not args.profile_from_env:
        (work / "dagster_home").mkdir(parents=True)
        (work / "dagster_home" / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")

    from sharp_dagster.demo.generator import GeneratorConfig, generate
    from sharp_dagster.demo.run import QUIET, bootstrap_ods, demo_broker_dir, demo_days
    from sharp_dagster.servers.broker import LocalBroker
    from sharp_dagster.settings import DEFAULT_START, KAFKA_ENV, Settings

    settings = Settings.from_env()
    probes = Probes()
    out: dict = {
        "days": n_days,
        "users": args.users,
        "mode": "backfill" if args.backfill else "single-run" if args.single_run else "run per day",
    }
    t0 = time.monotonic()
    generate(settings.sample_dir, GeneratorConfig(start=DEFAULT_START, days=max(n_days, 7), users=args.users))
    out["generate_s"] = round(time.monotonic() - t0, 2)
    broker = LocalBroker(base_dir=demo_broker_dir(settings)).start()
    os.environ[KAFKA_ENV] = broker.bootstrap_servers
    try:
        probes.install()  # before the definitions import anything by name
        t0 = time.monotonic()
        from dagster import DagsterInstance

        from sharp_dagster.cdc.capture.kafka_topics import ensure_topic
        from sharp_dagster.definitions import defs
        from sharp_dagster.demo.replay import replay_day
        from sharp_dagster.warehouse.cdc_layout import landing_assets

        out["definitions_load_s"] = round(time.monotonic() - t0, 2)
        source, _database, topic = landing_assets()[0]
        ensure_topic({"bootstrap.servers": broker.bootstrap_servers}, topic, source.topic_partitions)
        t0 = time.monotonic()
        spark_resource = defs.resources["spark"]
        spark = spark_resource.session()
        out["spark_start_s"] = round(time.monotonic() - t0, 2)
        out["spark_cores"] = spark.sparkContext.defaultParallelism
        t0 = time.monotonic()
        bootstrap_ods(spark, spark_resource.store(), settings.sample_dir)
        out["bootstrap_ods_s"] = round(time.monotonic() - t0, 2)
        probes.calls.clear()
        probes.py4j_log.clear()
        daily = defs.resolve_job_def("warehouse_daily")
        hourly = defs.resolve_job_def("binlog_hourly")
        runs: list[dict] = []
        jobs: dict[int, tuple] = {}
        replay_s: list[float] = []
        changes = 0
        t_all = time.monotonic()
        with DagsterInstance.get() as instance:

            def execute(job, partitions: int, **kwargs) -> None:
                start = time.time()
                result = job.execute_in_process(
                    instance=instance, raise_on_error=False, run_config=QUIET, **kwargs
                )
                end = time.time()
                probes.paused = True
                jobs.update(spark_jobs(spark))
                steps = step_windows(instance, result.run_id)
                probes.paused = False
                runs.append(
                    {"job": job.name, "start": start, "end": end, "steps": steps, "partitions": partitions}
                )
                if not result.success:
                    failure = next((e for e in result.all_events if e.is_step_failure), None)
                    reason = failure.step_failure_data.error.message.strip() if failure else "run failed"
                    raise SystemExit(f"{job.name} {kwargs} failed: {reason}")

            days = demo_days(DEFAULT_START, n_days)
            for i, day in enumerate(days, start=1):
                t = time.monotonic()
                changes += replay_day(
                    settings.sample_dir,
                    day,
                    broker.bootstrap_servers,
                    topic,
                    source.source_id,
                    source.lateness_minutes,
                )
                replay_s.append(time.monotonic() - t)
                if args.backfill:
                    continue
                execute(hourly, 1, partition_key=f"{day}-23:00")
                if not args.single_run:
                    execute(daily, 1, partition_key=day)
                print(f"[{i}/{n_days}] {day}: {time.monotonic() - t:.1f}s", flush=True)
            if args.backfill:  # one landing of every hour of the range (counted as one partition per day)
                t = time.monotonic()
                execute(
                    hourly,
                    n_days,
                    tags={
                        "dagster/asset_partition_range_start": f"{days[0]}-00:00",
                        "dagster/asset_partition_range_end": f"{days[-1]}-23:00",
                    },
                )
                print(f"single landing run over {n_days} days: {time.monotonic() - t:.1f}s", flush=True)
            if args.single_run:  # every daily asset over the whole range in one run, partitions in order
                t = time.monotonic()
                execute(
                    daily,
                    n_days,
                    tags={
                        "dagster/asset_partition_range_start": days[0],
                        "dagster/asset_partition_range_end": days[-1],
                    },
                )
                print(
                    f"single run of {daily.name} over {n_days} days: {time.monotonic() - t:.1f}s", flush=True
                )
        out["wall_s"] = round(time.monotonic() - t_all, 2)
        out["replay_into_kafka_s"] = round(sum(replay_s), 2)
        out["binlog_changes"] = changes
        out.update(analyse(runs, jobs, probes, out["wall_s"] - out["replay_into_kafka_s"]))
        out["probes_missing"] = probes.missing
        print(json.dumps(out, indent=2))
        return 0
    finally:
        broker.stop()
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def analyse(runs: list[dict], jobs: dict[int, tuple], probes: Probes, pipeline_s: float) -> dict:
    """Put every cost in its run and step; the figures and the findings."""
    windows = [(s, e, r["job"], k) for r in runs for k, s, e, _ in r["steps"]]
    asset_parts = sum(r["partitions"] * assets for r in runs for *_, assets in r["steps"])
    step_parts = {k: r["partitions"] for r in runs for k, *_ in r["steps"]}  # a step's partitions in its run

    def where(t: float) -> str | None:
        for s, e, _job, key in windows:
            if s <= t <= e:
                return key
        return None

    def probe_at(t: float) -> str:
        best, depth = "not in a probe (asset body: Python, Spark plans, Dagster)", -1
        for s, e, _x, cat, d in probes.calls:
            if s <= t <= e and d > depth:
                best, depth = cat, d
        return best

    run_walls = [r["end"] - r["start"] for r in runs]
    setup = [r["steps"][0][1] - r["start"] if r["steps"] else 0 for r in runs]
    teardown = [r["end"] - max(e for _, _, e, _ in r["steps"]) if r["steps"] else 0 for r in runs]
    step_time = sum(e - s for s, e, *_ in windows)
    between = sum(run_walls) - sum(setup) - sum(teardown) - step_time

    # Per step key: seconds, Spark jobs, Py4J round trips, probe time.
    per_step: dict[str, dict] = defaultdict(
        lambda: {"seconds": [], "jobs": 0, "job_s": 0.0, "py4j": 0, "py4j_short_s": 0.0, "cats": Counter()}
    )
    for s, e, _job, key in windows:
        per_step[key]["seconds"].extend([(e - s) / step_parts[key]] * step_parts[key])
    jobs_by_probe: Counter = Counter()
    job_s_by_probe: Counter = Counter()
    jobs_outside = 0
    for sub, comp, _status in jobs.values():
        if sub is None:
            continue
        key = where(sub)
        dur = (comp - sub) if comp else 0.0
        if key is None:
            jobs_outside += 1
            continue
        per_step[key]["jobs"] += 1
        per_step[key]["job_s"] += dur
        cat = probe_at(sub)
        jobs_by_probe[cat] += 1
        job_s_by_probe[cat] += dur
    for t, dur in probes.py4j_log:
        key = where(t)
        if key:
            per_step[key]["py4j"] += 1
            if dur < 0.005:  # a round trip that ran no Spark job: the cost of the call itself
                per_step[key]["py4j_short_s"] += dur
    cat_s: Counter = Counter()
    cat_calls: Counter = Counter()
    for s, _e, excl, cat, _d in probes.calls:
        key = where(s)
        if key is not None:
            cat_s[cat] += excl
            cat_calls[cat] += 1
            per_step[key]["cats"][cat] += excl
        elif cat == "Dagster storage SQL":
            cat_s["Dagster storage SQL (run set-up/teardown)"] += excl
    cat_s["not in a probe (asset body: Python, Spark plans, Dagster)"] = step_time - sum(
        v for k, v in cat_s.items() if not k.endswith("(run set-up/teardown)")
    )

    total = sum(run_walls)
    n = max(asset_parts, 1)
    assets = {
        key: {
            "partitions": len(v["seconds"]),
            "median_s": round(statistics.median(v["seconds"]), 3),
            "min_s": round(min(v["seconds"]), 3),
            "spark_jobs_per_partition": round(v["jobs"] / len(v["seconds"]), 1),
            "spark_job_s_per_partition": round(v["job_s"] / len(v["seconds"]), 3),
            "py4j_round_trips_per_partition": round(v["py4j"] / len(v["seconds"])),
            "py4j_short_calls_s_per_partition": round(v["py4j_short_s"] / len(v["seconds"]), 3),
            "top_costs_s_per_partition": {
                c: round(x / len(v["seconds"]), 3)
                for c, x in (
                    v["cats"] + Counter({"not in a probe": sum(v["seconds"]) - sum(v["cats"].values())})
                ).most_common(6)
            },
        }
        for key, v in sorted(per_step.items())
    }
    costs = {
        "run set-up (before the first step)": sum(setup),
        "run teardown (after the last step)": sum(teardown),
        "between steps (Dagster)": between,
        **{f"in steps: {k}": v for k, v in cat_s.items() if not k.endswith("(run set-up/teardown)")},
    }
    breakdown = {
        k: {
            "s_per_asset_partition": round(v / n, 3),
            "share": round(v / total, 3),
            "calls": cat_calls.get(k[10:], 0),
        }
        for k, v in sorted(costs.items(), key=lambda kv: -kv[1])
    }
    res = {
        "asset_partitions": asset_parts,
        "runs": len(runs),
        "s_per_asset_partition": round(total / n, 3),
        "s_per_asset_partition_incl_replay": round(pipeline_s / n, 3),
        "target_s_per_asset_partition": TARGET_S,
        "run_wall_s_total": round(total, 2),
        "run_setup_s_median": round(statistics.median(setup), 3),
        "run_teardown_s_median": round(statistics.median(teardown), 3),
        "steps_s_total": round(step_time, 2),
        "spark_jobs_total": len(jobs),
        "spark_jobs_per_asset_partition": round(sum(v["jobs"] for v in per_step.values()) / n, 1),
        "spark_jobs_outside_steps": jobs_outside,
        "spark_job_s_per_asset_partition": round(sum(v["job_s"] for v in per_step.values()) / n, 3),
        "py4j_round_trips_per_asset_partition": round(sum(v["py4j"] for v in per_step.values()) / n),
        "py4j_short_calls_s_per_asset_partition": round(
            sum(v["py4j_short_s"] for v in per_step.values()) / n, 3
        ),
        "breakdown": breakdown,
        "spark_jobs_by_probe_per_asset_partition": {
            k: {"jobs": round(c / n, 2), "job_s": round(job_s_by_probe[k] / n, 3)}
            for k, c in jobs_by_probe.most_common()
        },
        "assets": assets,
    }
    res["findings"] = findings(res)
    return res


def findings(r: dict) -> list[str]:
    """The top costs per asset-partition with figures, largest first, then what would bring them down."""
    n = r["asset_partitions"]
    out = [
        f"{r['s_per_asset_partition']} s per asset-partition over {n} asset-partitions in {r['runs']} Dagster runs "
        f"(target {r['target_s_per_asset_partition']:g} s); {r['spark_jobs_per_asset_partition']} Spark jobs per "
        f"asset-partition, {r['spark_job_s_per_asset_partition']} s of it inside Spark jobs; "
        f"{r['py4j_round_trips_per_asset_partition']} JVM round trips per asset-partition "
        f"({r['py4j_short_calls_s_per_asset_partition']} s in the short ones alone)."
    ]
    for name, b in list(r["breakdown"].items())[:10]:
        calls = f", {round(b['calls'] / n, 1)} calls" if b["calls"] else ""
        out.append(
            f"cost: {name}: {b['s_per_asset_partition']} s per asset-partition ({b['share']:.0%}{calls})"
        )
    jobs = r["spark_jobs_by_probe_per_asset_partition"]
    actions = {k: v for k, v in jobs.items() if k.startswith("DataFrame.")}
    if actions:
        out.append(
            "Spark jobs started by DataFrame actions, per asset-partition: "
            + "; ".join(f"{k}: {v['jobs']} jobs, {v['job_s']} s" for k, v in list(actions.items())[:6])
        )
    heavy = sorted(r["assets"].items(), key=lambda kv: -kv[1]["median_s"])[:4]
    for k, v in heavy:
        tops = ", ".join(f"{c} {x}" for c, x in list(v["top_costs_s_per_partition"].items())[:4])
        out.append(
            f"step {k}: median {v['median_s']} s, {v['spark_jobs_per_partition']} Spark jobs "
            f"({v['spark_job_s_per_partition']} s), {v['py4j_round_trips_per_partition']} JVM round trips; {tops}"
        )
    # What would bring it down, each with the figure it rests on.
    setup = r["run_setup_s_median"] + r["run_teardown_s_median"]
    out.append(
        f"proposal: one run per backfill range instead of {r['runs']} runs (Dagster's single-run backfill, "
        f"partitions in order inside the run): run set-up + teardown is {round(setup, 2)} s per run, "
        f"{round(setup * r['runs'] / n, 3)} s per asset-partition today."
    )
    per_job = r["spark_job_s_per_asset_partition"] / max(r["spark_jobs_per_asset_partition"], 1)
    action_jobs = sum(v["jobs"] for v in actions.values())
    out.append(
        f"proposal: fewer Spark jobs per asset: {action_jobs:.1f} of the {r['spark_jobs_per_asset_partition']} jobs "
        f"per asset-partition are count()/collect()/first() results the run needs as numbers (row counts, "
        f"partition lists, rule verdicts); a row count is in the Iceberg snapshot summary of the write "
        f"(added-records) and the rules' aggregates can be one scan: each job costs about "
        f"{round(per_job, 3)} s in Spark alone, plus its scheduling."
    )
    if r["py4j_round_trips_per_asset_partition"] > 500:
        out.append(
            f"proposal: build plans with fewer JVM calls: {r['py4j_round_trips_per_asset_partition']} Py4J round "
            f"trips per asset-partition (the ODS merges build their plan Column by Column); one SQL text or one "
            f"Scala-side call per plan would remove most of the "
            f"{r['py4j_short_calls_s_per_asset_partition']} s they cost."
        )
    cat = r["breakdown"].get("in steps: catalog: refresh/load")
    if cat:
        out.append(
            f"proposal: load each Iceberg table once per run: {round(cat['calls'] / n, 1)} catalog refreshes/loads "
            f"per asset-partition cost {cat['s_per_asset_partition']} s; a run that committed knows the new "
            f"metadata without reloading it."
        )
    return out


if __name__ == "__main__":
    sys.exit(main())
