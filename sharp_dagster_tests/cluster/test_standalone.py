"""One asset chain materialized through Dagster on a real Spark standalone cluster, checked against local mode.

The runs happen in subprocesses: Spark allows one SparkContext per process, and this test process may already
hold a local one (the session `spark` fixture of other tests).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sharp_dagster.demo.generator import GeneratorConfig, generate
from sharp_dagster.servers.spark_cluster import SparkStandaloneCluster
from sharp_dagster.settings import REPO_ROOT
from sharp_dagster_tests.cdc_support import local_broker

pytestmark = pytest.mark.slow

PARTITION = "2024-01-01"
CHAIN = ["ods/orders", "ods/order_item", "ods/product", "dwd/order_detail"]
RUN_TIMEOUT = 600  # ~20-40 s on a quiet machine; several minutes when the 2 cores are shared

# argv: partition, result json, asset keys (comma separated), then warehouse folders to read back.
# Materializes the assets of one partition through the code location's job, then reads the written partitions
# of every warehouse folder given with this process's session (the same session the run used).
RUN_SCRIPT = r"""
import json, sys, traceback
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
    for folder in read_dirs:
        tables = out["tables"][folder] = {}
        for key in keys:
            layer, name = key.split("/")
            df = spark.read.parquet(f"{folder}/{layer}.db/{name}/dt={partition}")
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


def _env(data_dir: Path, sample_dir: Path, master: str) -> dict[str, str]:
    """Each run has a data folder of its own (warehouse, job log, Dagster home); the sample shop is shared."""
    (data_dir / "dagster_home").mkdir(parents=True, exist_ok=True)
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
            "SHARP_SPARK_CONF": "spark.executor.memory=512m,spark.driver.memory=1g,spark.cores.max=1",
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "PYTHONPATH": str(REPO_ROOT),
        }
    )
    env.pop("SHARP_SPARK_DRIVER_HOST", None)
    return env


@pytest.fixture(autouse=True)
def _binlog_broker():
    """A broker for the whole test: the cluster run and the local-mode run both land the day's binlog."""
    with local_broker():
        yield


def test_asset_chain_on_standalone_cluster_matches_local_mode(tmp_path: Path) -> None:
    sample_dir = tmp_path / "sample"
    generate(sample_dir, GeneratorConfig(days=2))
    cluster_data, local_data = tmp_path / "data_cluster", tmp_path / "data_local"
    cluster_wh, local_wh = cluster_data / "warehouse", local_data / "warehouse"
    timings: dict[str, float] = {}

    t0 = time.monotonic()
    with (
        local_broker(),
        SparkStandaloneCluster(base_dir=tmp_path / "cluster", cores=1, memory="1g") as cluster,
    ):
        timings["cluster_start"] = time.monotonic() - t0
        t1 = time.monotonic()
        on_cluster = _run(tmp_path, "cluster", _env(cluster_data, sample_dir, cluster.master_url), [])
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

    # Local mode, same partition, another warehouse; this process also reads both warehouses back.
    t2 = time.monotonic()
    local = _run(tmp_path, "local", _env(local_data, sample_dir, "local[1]"), [cluster_wh, local_wh])
    timings["local_run_and_read"] = time.monotonic() - t2
    assert local["master"] == "local[1]"

    assert set(on_cluster["rows"]) == set(CHAIN), on_cluster["rows"]
    assert on_cluster["rows"] == local["rows"], (on_cluster["rows"], local["rows"])
    from_cluster, from_local = local["tables"][str(cluster_wh)], local["tables"][str(local_wh)]
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
    print(f"timings: {json.dumps({k: round(v, 1) for k, v in timings.items()})}; rows: {on_cluster['rows']}")
