"""The production profile on one machine, run as its users run it: an asset backfill of landing -> ODS -> DWD -> ADS
over two days, launched over the webserver's GraphQL (what the UI's launch dialog sends) and executed by Dagster's
daemon, each run a process of its own started by the run queue (deploy/dagster.yaml: Dagster's instance on a real
PostgreSQL, QueuedRunCoordinator, DefaultRunLauncher). The runs' Spark drivers use a standalone cluster of two
workers (each its own work and local dirs); the warehouse is on a real HDFS, the job log and the Iceberg catalog on
the same PostgreSQL server, the binlog comes through a real Kafka broker.

Asserted: every table of the chain equals the source at each day's end (the generated snapshot with the days'
changes replayed: ODS rows, the DWD lines and the ADS aggregates computed from them); Dagster's instance records
each partition's row count as the table holds it; the driver's data folder holds no table data, marker, quarantine
or lineage file; the cluster's executors (never the driver) ran the landing, merge and SQL tasks (the Spark event
logs); and one worker, killed with its executor while that executor runs a task of the ODS merge, costs nothing:
Spark runs the lost task again on the other worker, the backfill completes, the tables are still equal and the job
log records every period as it ended (SUCCESS, no period left RUNNING, no FAILURE).

The cluster's bootstrap and read-back happen in subprocesses: Spark allows one SparkContext per process, and this
test process may hold a local one (the session `spark` fixture of other tests). The source is the oracle, not a
second run of the same days in local mode: that run (the embedded profile's, which the rest of the suite covers)
cost this test ~200 of its CPU seconds and could only agree with code it shares.
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
from decimal import Decimal
from pathlib import Path

import pytest

from sharp_dagster import jvm
from sharp_dagster.demo.generator import GeneratorConfig, generate
from sharp_dagster.servers.dagster_dev import DagsterDev
from sharp_dagster.servers.spark_cluster import SparkStandaloneCluster
from sharp_dagster.settings import REPO_ROOT
from sharp_dagster_tests.cdc_support import local_broker
from sharp_dagster_tests.cluster import support
from sharp_dagster_tests.ui.conftest import _wait_location_loaded, graphql

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

DAYS = ["2024-01-01", "2024-01-02"]
LANDING = "original_binlog/shop"
CHAIN = ["ods/orders", "ods/order_item", "ods/product", "dwd/order_detail", "ads/gmv_by_category"]
RUN_TIMEOUT = 2400  # a few minutes on a quiet machine; much more when the 2 cores are shared

# argv: mode, result json, asset keys (comma separated), days.
# - bootstrap: the cluster warehouse's first ODS states from the snapshot (the deployment's one-time set-up).
# - read: every written partition read back from the warehouse of the environment, once `<result json>.go` exists.
SCRIPT = r"""
import json, os, sys, time, traceback
from sharp_dagster.settings import Settings
from sharp_dagster.spark.iceberg import warehouse_tables
from sharp_dagster.spark.session import build_spark_session
from sharp_dagster.spark.tables import TableRef
from sharp_dagster.cdc.ods.read import read_days

mode, out_path, keys, days = sys.argv[1], sys.argv[2], sys.argv[3].split(","), sys.argv[4:]
out = {"rows": {}, "tables": {}, "error": None}
if mode == "bootstrap":
    from sharp_dagster.definitions import defs
    from sharp_dagster.demo.run import bootstrap_ods

    spark_resource = defs.resources["spark"]
    out["rows"] = bootstrap_ods(spark_resource.session(), spark_resource.store(), Settings.from_env().sample_dir)
if mode == "read":
    spark = build_spark_session()  # started early (a JVM start is slow on a loaded machine); read when told to
    while not os.path.exists(out_path + ".go"):
        time.sleep(1)
    try:
        store = warehouse_tables(spark, Settings.from_env())
        for key in keys:
            layer, name = key.split("/")
            for day in days:
                if layer == "ods":  # a published ODS day is the tag of its day (cdc/ods/versions.py)
                    df = read_days(store, name, [day]).drop("dt")
                else:
                    df = store.read_partitions(TableRef(layer, name, ("dt",)), [{"dt": day}])
                out["tables"][f"{key}@{day}"] = sorted(df.toJSON().collect())
    except Exception:
        out["error"] = "read back failed:\n" + traceback.format_exc()
with open(out_path, "w") as f:
    json.dump(out, f)
"""

LAUNCH_BACKFILL = """mutation($params: LaunchBackfillParams!) { launchPartitionBackfill(backfillParams: $params) {
  __typename ... on LaunchBackfillSuccess { backfillId } ... on PythonError { message } } }"""
BACKFILL_STATUS = """query($id: String!) { partitionBackfillOrError(backfillId: $id) {
  __typename ... on PartitionBackfill { status } ... on PythonError { message } } }"""


def _start(tmp_path: Path, mode: str, env: dict[str, str], keys: list[str]) -> tuple:
    script = tmp_path / "sharp_run.py"
    if not script.exists():
        script.write_text(SCRIPT)
    out, log = tmp_path / f"{mode}.json", tmp_path / f"{mode}.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            [sys.executable, str(script), mode, str(out), ",".join(keys), *DAYS],
            env=env,
            cwd=tmp_path,
            stdout=fh,
            stderr=subprocess.STDOUT,
        )
    return mode, proc, out, log


def _finish(mode: str, proc: subprocess.Popen, out: Path, log: Path) -> dict:
    try:
        proc.wait(timeout=RUN_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    tail = log.read_text(errors="replace")[-4000:]
    assert proc.returncode == 0 and out.exists(), f"{mode} exited with {proc.returncode}:\n{tail}"
    result = json.loads(out.read_text())
    assert result["error"] is None, f"{mode} failed: {result['error']}\n{tail}"
    return result


def _env(data_dir: Path, sample_dir: Path, dagster_home: Path, **settings: str) -> dict[str, str]:
    """A process's environment: its own data folder and Dagster home, the shared sample shop, and `settings`."""
    dagster_home.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHARP_", "DAGSTER_PG"))}
    env.update(
        {
            "SHARP_DATA_DIR": str(data_dir),
            "SHARP_SAMPLE_DIR": str(sample_dir),
            "SHARP_KAFKA_BOOTSTRAP": os.environ["SHARP_KAFKA_BOOTSTRAP"],
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
    from sharp_dagster_tests.cluster.deploy_support import env_file_settings

    home = tmp_path / "cluster_dagster_home"
    home.mkdir()
    shutil.copy(REPO_ROOT / "deploy" / "dagster.yaml", home / "dagster.yaml")
    dagster_db = pg_server.create_database().rsplit("/", 1)[1]
    events.mkdir()
    spark_conf = (
        # Two executors of one core, one on each worker; a 1g driver (a small, shared machine).
        "spark.executor.memory=512m,spark.executor.cores=1,spark.cores.max=2,spark.driver.memory=1g,"
        # One plain JSON-lines event log per application (Spark 4 rolls and compresses them by default).
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


def _instance(env: dict[str, str]):
    """Dagster's instance of the cluster profile (PostgreSQL), opened in this process as the UI would."""
    from dagster import DagsterInstance

    # dagster.yaml reads these when the instance is built; DAGSTER_HOME of this process stays as it is.
    os.environ.update({k: v for k, v in env.items() if k.startswith(("DAGSTER_PG", "DAGSTER_MAX"))})
    return DagsterInstance.from_config(env["DAGSTER_HOME"])


def _kill_worker_mid_merge(cluster, env: dict[str, str], found: dict) -> None:
    """Watch Dagster's instance for the start of an ODS merge step of the backfill; then, as soon as worker 1's
    executor runs one of its tasks (the executor's own log), kill worker 1 and its executor."""
    from dagster import DagsterEventType, RunsFilter

    deadline = time.monotonic() + RUN_TIMEOUT
    with _instance(env) as instance:
        while not found.get("step"):
            if found.get("stop") or time.monotonic() > deadline:
                return
            for run in instance.get_runs(filters=RunsFilter(tags={"dagster/backfill": found["backfill"]})):
                for entry in instance.all_logs(run.run_id, of_type=DagsterEventType.STEP_START):
                    if (entry.step_key or "").startswith("ods"):
                        found["step"] = entry.step_key
            time.sleep(0.5)
    while not found.get("stop") and time.monotonic() < deadline:
        running = support.tasks_running(cluster.worker_dir(1) / "work")
        if running:
            found["killed_at"], found["tasks_in_flight"] = time.time(), sorted(running)
            cluster.kill_worker(1)
            return
        time.sleep(0.2)


def _backfill(dev: DagsterDev, env: dict[str, str], cluster, found: dict) -> str:
    """The asset backfill of the landing's hours and the chain's days, as the UI's launch dialog sends it; the
    daemon runs it (the landing first, then the chain). Returns its final status."""
    hours = {"range": {"start": f"{DAYS[0]}-00:00", "end": f"{DAYS[-1]}-23:00"}}
    days = {"range": {"start": DAYS[0], "end": DAYS[-1]}}
    selection = [{"assetKey": {"path": LANDING.split("/")}, "partitions": hours}] + [
        {"assetKey": {"path": key.split("/")}, "partitions": days} for key in CHAIN
    ]
    launched = graphql(dev.url, LAUNCH_BACKFILL, {"params": {"partitionsByAssets": selection}}, timeout=300)
    answer = launched["launchPartitionBackfill"]
    assert answer["__typename"] == "LaunchBackfillSuccess", answer
    found["backfill"] = answer["backfillId"]
    watcher = threading.Thread(target=_kill_worker_mid_merge, args=(cluster, env, found))
    watcher.start()
    try:
        deadline = time.monotonic() + RUN_TIMEOUT
        status = "REQUESTED"
        while status in ("REQUESTED", "CANCELING") and time.monotonic() < deadline:
            time.sleep(3)
            try:
                answer = graphql(dev.url, BACKFILL_STATUS, {"id": found["backfill"]}, timeout=120)
            except OSError:  # a webserver slow to answer on a loaded machine; the deadline above decides
                continue
            status = answer["partitionBackfillOrError"].get("status") or answer
    finally:
        found["stop"] = True
        watcher.join()
    return status


def _runs_of(env: dict[str, str], backfill_id: str) -> tuple[str, list[dict], dict[str, int]]:
    """From Dagster's instance: its run storage class, the backfill's runs and the row counts they recorded."""
    from dagster import DagsterEventType, RunsFilter

    with _instance(env) as instance:
        storage = type(instance.run_storage).__name__
        runs, rows = [], {}
        for run in instance.get_runs(filters=RunsFilter(tags={"dagster/backfill": backfill_id})):
            runs.append({"id": run.run_id, "status": run.status.value, "assets": sorted(
                k.to_user_string() for k in run.asset_selection or [])})  # fmt: skip
            for entry in instance.all_logs(run.run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION):
                rows.update(support.partition_rows(entry.asset_materialization))
    return storage, runs, rows


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


def _replay(sample_dir: Path) -> None:
    """Both days' binlog into the topic once, before anything runs (a backfill of past days); both profiles land
    the same messages (each from its own job log's offsets)."""
    from sharp_dagster.cdc.capture.kafka_topics import ensure_topic
    from sharp_dagster.demo.replay import replay_day
    from sharp_dagster.warehouse.cdc_layout import landing_assets

    source, _, topic = landing_assets()[0]
    bootstrap = os.environ["SHARP_KAFKA_BOOTSTRAP"]
    ensure_topic({"bootstrap.servers": bootstrap}, topic, source.topic_partitions)
    for day in DAYS:
        replay_day(sample_dir, day, bootstrap, topic, source.source_id, source.lateness_minutes)


def _through_dagster(tmp_path: Path, sample_dir: Path, cluster, servers, found: dict, timings: dict) -> tuple:
    """On the cluster the one-time bootstrap, then `dagster dev` (webserver, daemon, code server) on
    deploy/dagster.yaml and the backfill launched over its GraphQL. Returns the cluster's environment and the
    read-back process (waiting for its go)."""
    hdfs, pg_server, events = servers
    env = _cluster_env(tmp_path, sample_dir, cluster, hdfs, pg_server, events)
    # The deployment's one-time set-up (the first ODS states) needs no executors: a local driver writes them to the
    # cluster's warehouse and catalog while Dagster starts.
    setup_env = {**env, "SHARP_SPARK_MASTER": "local[1]", "SHARP_SPARK_CONF": "spark.driver.memory=1g"}
    boot = _start(tmp_path, "bootstrap", setup_env, CHAIN)
    read = _start(tmp_path, "read", setup_env, CHAIN)  # its session now, its reads after the backfill
    t1 = time.monotonic()
    try:
        log = tmp_path / "dagster_dev.log"
        with DagsterDev(env=env, log_path=log, cwd=tmp_path, startup_timeout=900) as dev:
            _wait_location_loaded(dev, timeout=900)
            timings["dagster_start"] = time.monotonic() - t1
            _finish(*boot)
            timings["bootstrap_waited"] = time.monotonic() - t1 - timings["dagster_start"]
            t2 = time.monotonic()
            status = _backfill(dev, env, cluster, found)
            timings["backfill"] = time.monotonic() - t2
            assert status == "COMPLETED_SUCCESS", f"backfill {found['backfill']}: {status}\n{dev.log_tail()}"
    except BaseException:
        for _, proc, _, _ in (boot, read):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        raise
    return env, read


def test_two_days_on_two_workers_hdfs_postgres(tmp_path: Path, hdfs, pg_server, _broker) -> None:
    sample_dir = tmp_path / "sample"
    generate(sample_dir, GeneratorConfig(days=len(DAYS)))
    _replay(sample_dir)
    events = tmp_path / "cluster_events"
    timings: dict[str, float] = {}
    found: dict = {}

    t0 = time.monotonic()
    with SparkStandaloneCluster(base_dir=tmp_path / "cluster", cores=1, memory="1g", workers=2) as cluster:
        timings["cluster_start"] = time.monotonic() - t0
        servers = (hdfs, pg_server, events)
        env, read = _through_dagster(tmp_path, sample_dir, cluster, servers, found, timings)
        apps = {a["id"] for a in cluster.applications()}
        logs = cluster.logs()
    t3 = time.monotonic()
    Path(f"{read[2]}.go").touch()
    on_cluster = _finish(*read)
    timings["read_back_waited"] = time.monotonic() - t3

    storage, runs, rows = _runs_of(env, found["backfill"])
    assert storage == "PostgresRunStorage", storage
    assert runs and all(r["status"] == "SUCCESS" for r in runs), runs
    assert any(r["assets"] == [LANDING] for r in runs), f"no run of the landing alone: {runs}"
    # Each Dagster run was one Spark application of this cluster, with an executor on each worker.
    run_apps = support.applications(events)
    assert len(run_apps) == len(runs) and set(run_apps) <= apps, (run_apps, apps, logs)
    for app in run_apps:
        for index in (0, 1):
            assert (cluster.worker_dir(index) / "work" / app).is_dir(), f"worker {index}, {app}\n{logs}"

    # Every table equals the source at each day's end, and Dagster recorded each partition's rows as it holds them.
    tables = on_cluster["tables"]
    assert sorted(tables) == sorted(f"{key}@{day}" for key in CHAIN for day in DAYS), sorted(tables)
    assert all(tables.values()), {key: len(table) for key, table in tables.items()}
    chain_rows = {k: v for k, v in rows.items() if not k.startswith(LANDING)}
    assert chain_rows == {key: len(table) for key, table in tables.items()}, rows
    _assert_equals_source(tables, sample_dir)

    # Nothing of the pipeline's data on the driver's disk: only the OpenLineage event file (no OPENLINEAGE_URL).
    left = [f for f in _local_files(tmp_path / "data_cluster") if not f.startswith("openlineage/")]
    assert not left, f"the driver's data folder holds {left}"
    _assert_executors_ran_the_work(events)
    lost = _assert_worker_loss_cost_nothing(events, found, env["SHARP_LOG_DB_URL"])
    print(f"timings: {json.dumps({k: round(v, 1) for k, v in timings.items()})}; runs: {runs}; killed in "
          f"{found['step']} with tasks {found['tasks_in_flight']} in flight; tasks lost: {len(lost)}")  # fmt: skip


def _assert_worker_loss_cost_nothing(events: Path, found: dict, log_db_url: str) -> list[dict]:
    """The worker died while its executor ran a merge task; Spark ran it again on the other one, and the job log
    tells it as it was. Returns the lost tasks."""
    assert found.get("killed_at"), f"worker 1 was never seen running a task of the ODS merge: {found}"
    removed = support.executor_removals(events)
    assert len(removed) == 1, removed
    lost = support.lost_tasks(events)
    assert lost, "no task was lost with the worker (it was killed while running one)"
    after = support.tasks_after(events, removed[0]["Timestamp"] / 1000)
    assert after and removed[0]["Executor ID"] not in after, f"no task ran after the kill elsewhere: {after}"
    rows = _job_log(log_db_url, DAYS)
    latest = {(name, start): status for name, start, _, status in rows}
    for key in CHAIN:
        for day in DAYS:
            assert latest.get((key, day.replace("-", "") + "000000")) == "SUCCESS", (key, day, rows)
    assert not [r for r in rows if r[3] in ("RUNNING", "FAILURE")], rows
    return lost


def _assert_equals_source(tables: dict[str, list[str]], sample_dir: Path) -> None:
    """Each day's ODS, DWD and ADS partitions equal what the source held at that day's end."""
    for n, day in enumerate(DAYS, start=1):
        source = support._source_tables(sample_dir, DAYS[:n])
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
        columns = ("order_count", "item_count", "gmv", "gmv_rank", "gmv_share")
        ads = {
            r["category"]: tuple(r[c] for c in columns)
            for r in (json.loads(line, parse_float=Decimal) for line in tables[f"ads/gmv_by_category@{day}"])
        }
        want_ads = support._expected_ads(source, day)
        assert ads == want_ads, f"ads/gmv_by_category[{day}] differs from the source: {ads} != {want_ads}"


def _assert_executors_ran_the_work(events: Path) -> None:
    """Every task ran on the cluster's executors, none in the driver: the landing's Kafka read and append, the ODS
    merge's writes, the DWD and ADS builds among them."""
    executors, by_plan = support._tasks_by_work(events)
    assert executors and "driver" not in executors, executors
    # The sample shop's files are local: read through the project's local file system (jvm/localfs).
    for props in support._spark_properties(events):
        assert props.get("spark.hadoop.fs.file.impl") == jvm.LOCAL_FS_CLASS, props.get("spark.app.id")
    ran = sum(by_plan.values(), Counter())
    assert ran and set(ran) <= executors, f"tasks ran outside the cluster's executors {executors}: {ran}"
    summary = [(support.plan_io(plan), dict(c)) for plan, c in by_plan.items()]

    def tasks(*needles: str) -> int:
        return sum(
            sum(c.values()) for plan, c in by_plan.items() if all(n.lower() in plan.lower() for n in needles)
        )

    for what, needles in {
        "the landing's Kafka read and parse": ("KafkaRelation", "MapInArrow"),
        "the landing's append": ("AppendData", "IcebergWrite(table=sharp.original_binlog.shop,"),
        # A day's merge reads the tombstones, deletes the touched keys' rows of the current state on the run's
        # branch (DELETE FROM: a key-only scan, WriteDelta) and appends the day's live rows (cdc/ods/merge.py).
        "the merge's read of ods_state.orders": ("BatchScan sharp.ods_state.orders ",),
        "the merge's DELETE FROM ods.orders": ("WriteDelta", "BatchScan sharp.ods.orders"),
        "the merge's append to ods.orders": ("IcebergWrite(table=sharp.ods.orders,",),
        "the DWD build": ("IcebergWrite(table=sharp.dwd.order_detail,",),
        "the ADS build": ("IcebergWrite(table=sharp.ads.gmv_by_category,",),
    }.items():
        assert tasks(*needles) > 0, f"no executor task for {what}: {json.dumps(summary, indent=1)}"
