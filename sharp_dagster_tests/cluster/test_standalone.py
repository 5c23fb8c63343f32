"""The pipeline (landing, ODS merge, one DWD table) through Dagster on a real Spark standalone cluster.

A day of the sample shop's binlog goes through a real Kafka broker; on the cluster the hourly landing reads it with
Spark's Kafka source into the raw binlog table, the daily merge publishes the ODS tables and the DWD order-detail
table is built, all Iceberg tables. The tables must equal the source (the generated snapshot with the day's changes
replayed in Python) and what local mode writes from the same day. The cluster run's Spark event log shows that
its executors (never the driver) ran the tasks of the landing's Kafka read, of the merge and of the DWD build.

The runs happen in subprocesses: Spark allows one SparkContext per process, and this test process may already
hold a local one (the session `spark` fixture of other tests).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from sharp_dagster import jvm
from sharp_dagster.demo.generator import GeneratorConfig, generate, read_changes
from sharp_dagster.servers.spark_cluster import SparkStandaloneCluster
from sharp_dagster.settings import REPO_ROOT
from sharp_dagster_tests.cdc_support import local_broker

pytestmark = pytest.mark.slow

PARTITION = "2024-01-01"
CHAIN = ["ods/orders", "ods/order_item", "ods/product", "dwd/order_detail"]
RUN_TIMEOUT = 600  # ~20-40 s on a quiet machine; several minutes when the 2 cores are shared

# argv: partition, result json, asset keys (comma separated), then data folders to read back.
# Materializes the assets of one partition through the code location's job, then reads the written partitions
# of every data folder given (its Iceberg warehouse, the catalog in its job-log SQLite) with this process's
# session (the same session the run used).
RUN_SCRIPT = r"""
import json, sys, traceback
from pathlib import Path
from types import SimpleNamespace
from dagster import AssetKey, DagsterInstance
from sharp_dagster.definitions import defs

partition, out_path, keys = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
read_dirs = sys.argv[4:]
out = {"success": False, "rows": {}, "error": None}
job = defs.resolve_job_def("warehouse_daily")
quiet = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
with DagsterInstance.ephemeral() as instance:
    from sharp_dagster_tests.cdc_support import CdcFeed

    CdcFeed(defs, instance).land(partition)  # the day's binlog through the broker into the raw table
    result = job.execute_in_process(
        partition_key=partition, instance=instance, raise_on_error=False, run_config=quiet,
        asset_selection=[AssetKey(k.split("/")) for k in keys],
    )
out["success"] = result.success
for event in result.get_asset_materialization_events():
    mat = event.materialization
    out["rows"][mat.asset_key.to_user_string()] = int(mat.metadata["dagster/row_count"].value)
failure = next((e for e in result.all_events if e.is_step_failure), None)
if failure is not None:
    out["error"] = failure.step_failure_data.error.to_string()

from sharp_dagster.spark.session import build_spark_session
spark = build_spark_session()  # the run's session (getOrCreate)
out["master"] = spark.sparkContext.master
out["app_id"] = spark.sparkContext.applicationId
out["tables"] = {}
try:
    from sharp_dagster.spark.iceberg import warehouse_tables
    from sharp_dagster.spark.tables import TableRef

    for folder in read_dirs:
        tables = out["tables"][folder] = {}
        settings = SimpleNamespace(
            warehouse_dir=Path(folder) / "warehouse", log_db_url=f"sqlite:///{Path(folder) / 'sharp_log.db'}"
        )
        store = warehouse_tables(spark, settings)
        for key in keys:
            layer, name = key.split("/")
            df = store.read_partitions(TableRef(layer, name, ("dt",)), [{"dt": partition}])
            tables[key] = sorted(df.toJSON().collect())
except Exception:
    out["error"] = (out["error"] or "") + "\nread back failed:\n" + traceback.format_exc()
print(f"master={out['master']} app_id={out['app_id']} success={out['success']} rows={out['rows']}", flush=True)
spark.stop()
with open(out_path, "w") as f:
    json.dump(out, f)
"""


def _run(tmp_path: Path, label: str, env: dict[str, str], read_dirs: list[Path]) -> dict:
    script = tmp_path / "materialize.py"
    script.write_text(RUN_SCRIPT)
    out = tmp_path / f"{label}.json"
    log = tmp_path / f"{label}.log"
    cmd = [sys.executable, str(script), PARTITION, str(out), ",".join(CHAIN), *map(str, read_dirs)]
    with open(log, "wb") as fh:
        proc = subprocess.run(
            cmd, env=env, cwd=tmp_path, stdout=fh, stderr=subprocess.STDOUT, timeout=RUN_TIMEOUT, check=False
        )
    tail = log.read_text(errors="replace")[-4000:]
    assert proc.returncode == 0 and out.exists(), f"{label} run exited with {proc.returncode}:\n{tail}"
    result = json.loads(out.read_text())
    assert result["success"], f"{label} run failed: {result['error']}\n{tail}"
    assert result["error"] is None, f"{label}: {result['error']}"
    return result


def _env(data_dir: Path, sample_dir: Path, master: str, event_log: Path | None = None) -> dict[str, str]:
    """Each run has a data folder of its own (warehouse, job log, Dagster home); the sample shop is shared.

    With `event_log`, the run's Spark event log (every job, stage and task, with the executor that ran it) is
    written there."""
    (data_dir / "dagster_home").mkdir(parents=True, exist_ok=True)
    spark_conf = "spark.executor.memory=512m,spark.driver.memory=1g,spark.cores.max=1"
    if event_log is not None:
        event_log.mkdir(parents=True, exist_ok=True)
        # One plain JSON-lines file (Spark 4 rolls and compresses event logs by default).
        spark_conf += (
            f",spark.eventLog.enabled=true,spark.eventLog.dir=file://{event_log}"
            ",spark.eventLog.compress=false,spark.eventLog.rolling.enabled=false"
        )
    env = dict(os.environ)
    env.pop("SHARP_WAREHOUSE_DIR", None)
    env.pop("SHARP_LOG_DB_URL", None)
    env.update(
        {
            "SHARP_DATA_DIR": str(data_dir),
            "SHARP_WAREHOUSE_DIR": str(data_dir / "warehouse"),
            "SHARP_SAMPLE_DIR": str(sample_dir),
            "DAGSTER_HOME": str(data_dir / "dagster_home"),
            "SHARP_SPARK_MASTER": master,
            # The machine is small and shared: one executor of 512m, a 1g driver.
            "SHARP_SPARK_CONF": spark_conf,
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "PYTHONPATH": str(REPO_ROOT),
        }
    )
    env.pop("SHARP_SPARK_DRIVER_HOST", None)
    return env


# ODS table -> (key, columns compared with the source): numbers as numbers rounded to cents.
ODS_COLUMNS = {
    "ods/orders": ("order_id", ("user_id", "order_status", "total_amount")),
    "ods/order_item": ("item_id", ("order_id", "product_id", "quantity", "unit_price")),
    "ods/product": ("product_id", ("product_name", "category", "price")),
}
DWD_COLUMNS = (
    "item_id",
    "order_id",
    "user_id",
    "order_status",
    "product_id",
    "category",
    "quantity",
    "line_amount",
)


def _plain(value: Any) -> Any:
    return (
        round(float(value), 2)
        if isinstance(value, int | float | Decimal) and not isinstance(value, bool)
        else value
    )


def _source_tables(sample_dir: Path, day: str) -> dict[str, dict[Any, dict]]:
    """Every source table after `day`: the generated snapshot with the day's changes replayed (the oracle)."""
    state: dict[str, dict[Any, dict]] = {}
    keys = {key.split("/")[1]: pk for key, (pk, _) in ODS_COLUMNS.items()}
    for table, pk in keys.items():
        rows = state[table] = {}
        for path in sorted((sample_dir / "shop" / "snapshot" / table).glob("*.jsonl")):
            for line in path.read_text().splitlines():
                row = json.loads(line)
                rows[row[pk]] = row
    for change in read_changes(sample_dir, day):
        table = change["_table"]
        if table not in keys:
            continue
        if change["_op"] == "d":
            state[table].pop(change[keys[table]])
        else:
            state[table][change[keys[table]]] = change
    return state


def _expected_dwd(source: dict[str, dict[Any, dict]], day: str) -> list[tuple]:
    """dwd.order_detail from the source: each item of the orders placed on `day`, with the order's and product's
    state at the end of the day."""
    rows = []
    for item in source["order_item"].values():
        order = source["orders"].get(item["order_id"])
        if order is None or not order["order_time"].startswith(day):
            continue
        product = source["product"].get(item["product_id"]) or {}
        rows.append(
            tuple(
                _plain(v)
                for v in (
                    item["item_id"],
                    order["order_id"],
                    order["user_id"],
                    order["order_status"],
                    item["product_id"],
                    product.get("category") or "unknown",
                    item["quantity"],
                    Decimal(str(item["quantity"])) * Decimal(str(item["unit_price"])),
                )
            )
        )
    return sorted(rows)


def _spark_properties(event_log: Path) -> dict[str, str]:
    """The application's Spark properties, from its event log's environment update."""
    (path,) = [p for p in event_log.iterdir() if p.is_file() and not p.name.endswith(".inprogress")]
    for line in path.read_text().splitlines():
        if '"SparkListenerEnvironmentUpdate"' in line:
            props = json.loads(line)["Spark Properties"]
            return dict(props.items() if isinstance(props, dict) else props)
    return {}


def _tasks_by_work(event_log: Path) -> tuple[set[str], dict[str, Counter]]:
    """From a Spark event log: the executors the application was given, and for each SQL execution's physical
    plan the executors that ran its tasks (executor id -> tasks)."""
    (path,) = [p for p in event_log.iterdir() if p.is_file() and not p.name.endswith(".inprogress")]
    events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    executors = {e["Executor ID"] for e in events if e["Event"] == "SparkListenerExecutorAdded"}
    plans = {
        e["executionId"]: e.get("physicalPlanDescription", "")
        for e in events
        if e["Event"].endswith("SparkListenerSQLExecutionStart")
    }
    stage_execution = {}
    for e in events:
        if e["Event"] == "SparkListenerJobStart":
            execution = (e.get("Properties") or {}).get("spark.sql.execution.id")
            for stage in e["Stage IDs"]:
                stage_execution[stage] = int(execution) if execution is not None else None
    by_plan: dict[str, Counter] = {}
    for e in events:
        if e["Event"] == "SparkListenerTaskEnd":
            plan = plans.get(stage_execution.get(e["Stage ID"]), "")
            by_plan.setdefault(plan, Counter())[e["Task Info"]["Executor ID"]] += 1
    return executors, by_plan


@pytest.fixture(autouse=True)
def _binlog_broker():
    """A broker for the whole test: the cluster run and the local-mode run both land the day's binlog."""
    with local_broker():
        yield


def test_asset_chain_on_standalone_cluster_matches_local_mode(tmp_path: Path) -> None:
    sample_dir = tmp_path / "sample"
    generate(sample_dir, GeneratorConfig(days=2))
    cluster_data, local_data = tmp_path / "data_cluster", tmp_path / "data_local"
    events = tmp_path / "cluster_events"
    timings: dict[str, float] = {}

    t0 = time.monotonic()
    with (
        local_broker(),
        SparkStandaloneCluster(base_dir=tmp_path / "cluster", cores=1, memory="1g") as cluster,
    ):
        timings["cluster_start"] = time.monotonic() - t0
        t1 = time.monotonic()
        # Each run reads back its own warehouse, through the catalog its session is configured with (see
        # RUN_SCRIPT): the cluster's tables are read on the cluster.
        on_cluster = _run(
            tmp_path, "cluster", _env(cluster_data, sample_dir, cluster.master_url, events), [cluster_data]
        )
        timings["cluster_run"] = time.monotonic() - t1
        assert on_cluster["master"] == cluster.master_url, (on_cluster["master"], cluster.master_url)
        apps = {a["id"]: a for a in cluster.applications()}
        assert on_cluster["app_id"] in apps, (
            f"application {on_cluster['app_id']} not known to the master {cluster.master_url}: {sorted(apps)}\n"
            f"{cluster.logs()}"
        )
        # The worker launched an executor for this application (its work folder is named after it).
        executor_dir = cluster.base_dir / "work" / on_cluster["app_id"]
        assert executor_dir.is_dir(), (
            f"no executor ran on the worker for {on_cluster['app_id']}\n{cluster.logs()}"
        )

    # Every task of the cluster run ran on the cluster's executors, none in the driver: the landing's Kafka read
    # and parse, the ODS merge's writes and the DWD build among them.
    executors, by_plan = _tasks_by_work(events)
    assert executors and "driver" not in executors, executors
    # They wrote through the project's local file system (jvm/localfs): its jar is on their class path too.
    assert _spark_properties(events).get("spark.hadoop.fs.file.impl") == jvm.LOCAL_FS_CLASS
    ran = sum(by_plan.values(), Counter())
    assert ran and set(ran) <= executors, f"tasks ran outside the cluster's executors {executors}: {ran}"
    summary = {plan.splitlines()[0][:120] if plan else "(no SQL)": dict(c) for plan, c in by_plan.items()}

    def tasks(*needles: str) -> int:
        return sum(
            sum(c.values()) for plan, c in by_plan.items() if all(n.lower() in plan.lower() for n in needles)
        )

    for what, needles in {
        "the landing's Kafka read": ("KafkaRelation",),
        "the landing's parse (Python on Arrow batches)": ("KafkaRelation", "MapInArrow"),
        "the landing's append to the raw binlog table": (
            "AppendData",
            "IcebergWrite(table=sharp.original_binlog.shop,",
        ),
        "the merge of ods_state.orders (yesterday's state and the day's changes)": (
            "OverwritePartitionsDynamic",
            "BatchScan sharp.ods_state.orders ",
            "IcebergWrite(table=sharp.ods_state.orders,",
        ),
        "the ODS orders table's staged write": (
            "OverwritePartitionsDynamic",
            "IcebergWrite(table=sharp.ods.orders,",
        ),
        "the DWD build": ("OverwritePartitionsDynamic", "IcebergWrite(table=sharp.dwd.order_detail,"),
    }.items():
        assert tasks(*needles) > 0, f"no executor task for {what}: {json.dumps(summary, indent=1)}"

    # Local mode, same partition, another warehouse.
    t2 = time.monotonic()
    local = _run(tmp_path, "local", _env(local_data, sample_dir, "local[1]"), [local_data])
    timings["local_run_and_read"] = time.monotonic() - t2
    assert local["master"] == "local[1]"

    assert set(on_cluster["rows"]) == set(CHAIN), on_cluster["rows"]
    assert on_cluster["rows"] == local["rows"], (on_cluster["rows"], local["rows"])
    from_cluster, from_local = on_cluster["tables"][str(cluster_data)], local["tables"][str(local_data)]
    for key in CHAIN:
        assert len(from_cluster[key]) == on_cluster["rows"][key], (
            key,
            len(from_cluster[key]),
            on_cluster["rows"],
        )
        assert len(from_cluster[key]) > 0, f"{key}[{PARTITION}] is empty"
        assert from_cluster[key] == from_local[key], f"{key}[{PARTITION}]: cluster and local mode rows differ"
    sample = json.loads(from_cluster["dwd/order_detail"][0])
    assert {"item_id", "order_id", "line_amount", "category"} <= set(sample), sample

    # The cluster's tables equal the source at the end of the day.
    source = _source_tables(sample_dir, PARTITION)
    for key, (pk, columns) in ODS_COLUMNS.items():
        got = sorted(
            tuple(_plain(r.get(c)) for c in (pk, *columns)) for r in map(json.loads, from_cluster[key])
        )
        want = sorted(
            tuple(_plain(row.get(c)) for c in (pk, *columns)) for row in source[key.split("/")[1]].values()
        )
        assert got == want, f"{key}[{PARTITION}] on the cluster differs from the source"
    dwd = sorted(
        tuple(_plain(r.get(c)) for c in DWD_COLUMNS)
        for r in map(json.loads, from_cluster["dwd/order_detail"])
    )
    assert dwd == _expected_dwd(source, PARTITION), f"dwd/order_detail[{PARTITION}] differs from the source"
    print(f"timings: {json.dumps({k: round(v, 1) for k, v in timings.items()})}; rows: {on_cluster['rows']}")
