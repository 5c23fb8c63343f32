"""The production profile on one machine: landing -> ODS -> DWD -> ADS for two days through Dagster on a Spark
standalone cluster of two workers, the warehouse on a real HDFS, Dagster's instance (deploy/dagster.yaml), the job
log and the Iceberg catalog on a real PostgreSQL, the binlog through a real Kafka broker.

Asserted: the tables equal a local-mode run of the same days on the embedded profile (local Spark, SQLite, a local
warehouse) and, on the first day, the source itself; the driver's data folder holds no table data, marker,
quarantine or lineage file; the cluster's executors (never the driver) ran the landing, merge and SQL tasks (the
Spark event log); and one worker, killed with its executor while the second day's ODS merge runs, costs nothing:
Spark runs the lost tasks again on the other worker, the tables are still equal and the job log records every
period as it ended (SUCCESS, no period left RUNNING, no FAILURE).

The runs happen in subprocesses: Spark allows one SparkContext per process, and this test process holds a local
one (the session `spark` fixture of other tests).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from sharp_dagster import jvm
from sharp_dagster.demo.generator import GeneratorConfig, generate
from sharp_dagster.servers.spark_cluster import SparkStandaloneCluster
from sharp_dagster.settings import REPO_ROOT
from sharp_dagster_tests.cdc_support import local_broker
from sharp_dagster_tests.cluster import support

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

DAYS = ["2024-01-01", "2024-01-02"]
CHAIN = ["ods/orders", "ods/order_item", "ods/product", "dwd/order_detail", "ads/gmv_by_category"]
RUN_TIMEOUT = 2400  # a few minutes on a quiet machine; much more when the 2 cores are shared

# argv: result json, asset keys (comma separated), days. Lands each day's binlog (the hourly landing job) and
# materializes the day's chain (the daily job) on the instance of DAGSTER_HOME, then reads every written partition
# back with the run's own session and catalog.
RUN_SCRIPT = r"""
import json, sys, traceback
from dagster import AssetKey, DagsterInstance
from sharp_dagster.definitions import defs
from sharp_dagster_tests.cdc_support import QUIET, CdcFeed

out_path, keys, days = sys.argv[1], sys.argv[2].split(","), sys.argv[3:]
out = {"success": True, "rows": {}, "runs": {}, "error": None, "tables": {}}
job = defs.resolve_job_def("warehouse_daily")
with DagsterInstance.get() as instance:
    out["instance"] = type(instance.run_storage).__name__
    feed = CdcFeed(defs, instance)
    for day in days:
        feed.land(day)  # the day's binlog through the broker into the raw table, and its done markers
        print(f"merging {day}", flush=True)
        result = job.execute_in_process(
            partition_key=day, instance=instance, raise_on_error=False, run_config=QUIET,
            asset_selection=[AssetKey(k.split("/")) for k in keys],
        )
        out["runs"][day] = result.run_id
        out["success"] = out["success"] and result.success
        for event in result.get_asset_materialization_events():
            mat = event.materialization
            out["rows"][f"{mat.asset_key.to_user_string()}@{day}"] = int(mat.metadata["dagster/row_count"].value)
        failure = next((e for e in result.all_events if e.is_step_failure), None)
        if failure is not None:
            out["error"] = failure.step_failure_data.error.to_string()
            break

from sharp_dagster.settings import Settings
from sharp_dagster.spark.iceberg import warehouse_tables
from sharp_dagster.spark.session import build_spark_session
from sharp_dagster.spark.tables import TableRef

spark = build_spark_session()  # the runs' session (getOrCreate)
out["master"] = spark.sparkContext.master
out["app_id"] = spark.sparkContext.applicationId
try:
    store = warehouse_tables(spark, Settings.from_env())
    for key in keys:
        layer, name = key.split("/")
        for day in days:
            df = store.read_partitions(TableRef(layer, name, ("dt",)), [{"dt": day}])
            out["tables"][f"{key}@{day}"] = sorted(df.toJSON().collect())
except Exception:
    out["error"] = (out["error"] or "") + "\nread back failed:\n" + traceback.format_exc()
spark.stop()
with open(out_path, "w") as f:
    json.dump(out, f)
"""


def _start_run(tmp_path: Path, label: str, env: dict[str, str]) -> tuple[subprocess.Popen, Path, Path]:
    script = tmp_path / "materialize.py"
    if not script.exists():
        script.write_text(RUN_SCRIPT)
    out, log = tmp_path / f"{label}.json", tmp_path / f"{label}.log"
    cmd = [sys.executable, str(script), str(out), ",".join(CHAIN), *DAYS]
    with open(log, "wb") as fh:
        proc = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=fh, stderr=subprocess.STDOUT)
    return proc, out, log


def _finish_run(label: str, proc: subprocess.Popen, out: Path, log: Path) -> dict:
    try:
        proc.wait(timeout=RUN_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    tail = log.read_text(errors="replace")[-4000:]
    assert proc.returncode == 0 and out.exists(), f"{label} run exited with {proc.returncode}:\n{tail}"
    result = json.loads(out.read_text())
    assert result["success"] and result["error"] is None, f"{label} run failed: {result['error']}\n{tail}"
    return result


def _env(data_dir: Path, sample_dir: Path, dagster_home: Path, **settings: str) -> dict[str, str]:
    """A run's environment: its own data folder and Dagster home, the shared sample shop, and `settings`."""
    dagster_home.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHARP_", "DAGSTER_PG"))}
    kafka = os.environ["SHARP_KAFKA_BOOTSTRAP"]
    env.update(
        {
            "SHARP_DATA_DIR": str(data_dir),
            "SHARP_SAMPLE_DIR": str(sample_dir),
            "SHARP_KAFKA_BOOTSTRAP": kafka,
            "DAGSTER_HOME": str(dagster_home),
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "PYTHONPATH": str(REPO_ROOT),
            **settings,
        }
    )
    return env


def _cluster_env(tmp_path: Path, sample_dir: Path, cluster, hdfs, pg_server, events: Path) -> dict[str, str]:
    """The production profile: deploy/dagster.yaml and deploy/sharp.env's settings pointed at this machine."""
    from sharp_dagster_tests.cluster.test_deploy import env_file_settings

    home = tmp_path / "cluster_dagster_home"
    home.mkdir()
    shutil.copy(REPO_ROOT / "deploy" / "dagster.yaml", home / "dagster.yaml")
    dagster_db = pg_server.create_database().rsplit("/", 1)[1]
    events.mkdir()
    spark_conf = (
        # Two executors of one core, one on each worker; a 1g driver (a small, shared machine).
        "spark.executor.memory=512m,spark.executor.cores=1,spark.cores.max=2,spark.driver.memory=1g,"
        # One plain JSON-lines event log (Spark 4 rolls and compresses event logs by default).
        f"spark.eventLog.enabled=true,spark.eventLog.dir=file://{events},"
        "spark.eventLog.compress=false,spark.eventLog.rolling.enabled=false"
    )
    production = env_file_settings()
    return _env(
        tmp_path / "data_cluster",
        sample_dir,
        home,
        SHARP_WAREHOUSE_DIR=f"{hdfs.uri}/sharp/warehouse",
        SHARP_LOG_DB_URL=pg_server.create_database(),
        SHARP_SPARK_MASTER=cluster.master_url,
        SHARP_SPARK_CONF=spark_conf,
        DAGSTER_PG_HOST="127.0.0.1",
        DAGSTER_PG_PORT=str(pg_server.port),
        DAGSTER_PG_DB=dagster_db,
        DAGSTER_PG_USER="postgres",
        DAGSTER_PG_PASSWORD="",
        DAGSTER_MAX_CONCURRENT_RUNS=production["DAGSTER_MAX_CONCURRENT_RUNS"],
    )


def _kill_worker_mid_merge(cluster, env: dict[str, str], log: Path, day: str, found: dict) -> None:
    """Watch Dagster's instance (PostgreSQL, as the UI would) for the step start of `day`'s ODS merge; then, with
    the merge's Spark jobs under way, kill worker 1 and its executor."""
    from dagster import DagsterEventType, DagsterInstance, RunsFilter

    deadline = time.monotonic() + RUN_TIMEOUT
    # The run's process creates Dagster's tables: open the instance once it is under way (the day's landing ran).
    while f"merging {day}" not in log.read_text(errors="replace"):
        if found.get("stop") or time.monotonic() > deadline:
            return
        time.sleep(1)
    # dagster.yaml reads these when the instance is built; DAGSTER_HOME of this process stays as it is.
    os.environ.update({k: v for k, v in env.items() if k.startswith(("DAGSTER_PG", "DAGSTER_MAX"))})
    with DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        while time.monotonic() < deadline and not found.get("stop"):
            for run in instance.get_runs(filters=RunsFilter(tags={"dagster/partition": day})):
                for entry in instance.all_logs(run.run_id, of_type=DagsterEventType.STEP_START):
                    if (entry.step_key or "").startswith("ods"):
                        time.sleep(3)  # into the merge's Spark jobs
                        found["killed_at"] = time.time()
                        found["step"] = entry.step_key
                        cluster.kill_worker(1)
                        return
            time.sleep(0.5)


def _job_log(url: str, days: list[str]) -> list[tuple[str, str, int, str]]:
    from sqlalchemy import text

    from sharp_dagster.db import make_engine

    starts = [d.replace("-", "") + "000000" for d in days]
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                text("SELECT job_name, data_range_start, attempt, status FROM job_log ORDER BY 1, 2, 3")
            ).all()
    finally:
        engine.dispose()
    return [tuple(r) for r in rows if r[1] in starts]


def _local_files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


@pytest.fixture()
def _broker():
    with local_broker() as broker:
        yield broker


def test_two_days_on_two_workers_hdfs_postgres(tmp_path: Path, hdfs, pg_server, _broker) -> None:
    sample_dir = tmp_path / "sample"
    generate(sample_dir, GeneratorConfig(days=len(DAYS)))
    events = tmp_path / "cluster_events"
    timings: dict[str, float] = {}

    t0 = time.monotonic()
    with SparkStandaloneCluster(base_dir=tmp_path / "cluster", cores=1, memory="1g", workers=2) as cluster:
        timings["cluster_start"] = time.monotonic() - t0
        env = _cluster_env(tmp_path, sample_dir, cluster, hdfs, pg_server, events)
        # The embedded profile runs beside it (the same days, local mode, SQLite, a local warehouse).
        local_env = _env(
            tmp_path / "data_local",
            sample_dir,
            tmp_path / "local_dagster_home",
            SHARP_SPARK_MASTER="local[1]",
        )
        t1 = time.monotonic()
        found: dict = {}
        # Both at once: on a small machine the two runs overlap their waits (JVM starts, commits).
        local_proc = _start_run(tmp_path, "local", local_env)
        proc = _start_run(tmp_path, "cluster", env)
        watcher = threading.Thread(
            target=_kill_worker_mid_merge, args=(cluster, env, proc[2], DAYS[1], found)
        )
        watcher.start()
        try:
            on_cluster = _finish_run("cluster", *proc)
        except BaseException:
            local_proc[0].kill()
            local_proc[0].wait()
            raise
        finally:
            found["stop"] = True
            watcher.join()
        timings["cluster_run"] = time.monotonic() - t1
        apps = {a["id"] for a in cluster.applications()}
        logs = cluster.logs()
    local = _finish_run("local", *local_proc)
    timings["local_run_waited"] = time.monotonic() - t1 - timings["cluster_run"]

    assert on_cluster["instance"] == "PostgresRunStorage", on_cluster["instance"]
    assert on_cluster["master"] == cluster.master_url and on_cluster["app_id"] in apps, (
        on_cluster,
        apps,
        logs,
    )
    # Both workers launched an executor for the application (each in its own work folder).
    for index in (0, 1):
        assert (cluster.worker_dir(index) / "work" / on_cluster["app_id"]).is_dir(), f"worker {index}\n{logs}"

    # The same rows as the embedded profile, day by day, and the first day equals the source.
    assert on_cluster["rows"] == local["rows"] and len(on_cluster["rows"]) == len(CHAIN) * len(DAYS)
    for key, rows in on_cluster["tables"].items():
        assert rows, f"{key} is empty"
        assert rows == local["tables"][key], f"{key}: the cluster's rows differ from local mode's"
    _assert_equals_source(on_cluster["tables"], sample_dir, DAYS[0])

    # Nothing of the pipeline's data on the driver's disk: only the OpenLineage event file (no OPENLINEAGE_URL).
    left = [f for f in _local_files(tmp_path / "data_cluster") if not f.startswith("openlineage/")]
    assert not left, f"the driver's data folder holds {left}"
    _assert_executors_ran_the_work(events)

    # The worker died mid-merge; Spark ran its tasks again on the other one, and the job log tells it as it was.
    assert found.get("killed_at"), "the second day's ODS merge was never seen starting"
    removed = support.executor_removals(events)
    assert len(removed) == 1, removed
    rows = _job_log(env["SHARP_LOG_DB_URL"], DAYS)
    latest = {(name, start): status for name, start, _, status in rows}
    for key in CHAIN:
        for day in DAYS:
            start = day.replace("-", "") + "000000"
            assert latest.get((key, start)) == "SUCCESS", (key, day, rows)
    assert not [r for r in rows if r[3] in ("RUNNING", "FAILURE")], rows
    lost = len(support.lost_tasks(events))
    print(f"timings: {json.dumps({k: round(v, 1) for k, v in timings.items()})}; step {found['step']}; "
          f"tasks lost with the worker: {lost}; rows: {on_cluster['rows']}")  # fmt: skip


def _assert_equals_source(tables: dict[str, list[str]], sample_dir: Path, day: str) -> None:
    source = support._source_tables(sample_dir, day)
    for key, (pk, columns) in support.ODS_COLUMNS.items():
        got = sorted(
            tuple(support._plain(r.get(c)) for c in (pk, *columns))
            for r in map(json.loads, tables[f"{key}@{day}"])
        )
        want = sorted(
            tuple(support._plain(row.get(c)) for c in (pk, *columns))
            for row in source[key.split("/")[1]].values()
        )
        assert got == want, f"{key}[{day}] on the cluster differs from the source"
    dwd = sorted(
        tuple(support._plain(r.get(c)) for c in support.DWD_COLUMNS)
        for r in map(json.loads, tables[f"dwd/order_detail@{day}"])
    )
    assert dwd == support._expected_dwd(source, day), f"dwd/order_detail[{day}] differs from the source"


def _assert_executors_ran_the_work(events: Path) -> None:
    """Every task ran on the cluster's executors, none in the driver: the landing's Kafka read and append, the ODS
    merge's writes, the DWD and ADS builds among them."""
    executors, by_plan = support._tasks_by_work(events)
    assert executors and "driver" not in executors, executors
    # The sample shop's files are local: read through the project's local file system (jvm/localfs).
    assert support._spark_properties(events).get("spark.hadoop.fs.file.impl") == jvm.LOCAL_FS_CLASS
    ran = sum(by_plan.values(), Counter())
    assert ran and set(ran) <= executors, f"tasks ran outside the cluster's executors {executors}: {ran}"
    summary = {plan.splitlines()[0][:120] if plan else "(no SQL)": dict(c) for plan, c in by_plan.items()}

    def tasks(*needles: str) -> int:
        return sum(
            sum(c.values()) for plan, c in by_plan.items() if all(n.lower() in plan.lower() for n in needles)
        )

    for what, needles in {
        "the landing's Kafka read and parse": ("KafkaRelation", "MapInArrow"),
        "the landing's append": ("AppendData", "IcebergWrite(table=sharp.original_binlog.shop,"),
        "the merge of ods_state.orders": (
            "BatchScan sharp.ods_state.orders ",
            "IcebergWrite(table=sharp.ods",
        ),
        "the DWD build": ("IcebergWrite(table=sharp.dwd.order_detail,",),
        "the ADS build": ("IcebergWrite(table=sharp.ads.gmv_by_category,",),
    }.items():
        assert tasks(*needles) > 0, f"no executor task for {what}: {json.dumps(summary, indent=1)}"
