"""Ordered backfill of N daily partitions of a trivial Spark asset: ours vs Dagster's native self-dependent asset.

- ours: a log-driven SQL asset (claim, job-log steps, staged write, atomic swap per partition) backfilled as one
  single-run range (partitions strictly oldest first), in a fresh process; next to it, in the same process, the
  bare Spark work (the same query written partition by partition with `IcebergTables.write_partition`). Overhead per
  partition = (ours - bare Spark) / N. Target: at most 1 s.
- native: the same Spark work in a self-dependent asset (`AssetDep(self, TimeWindowPartitionMapping(-1, -1))`),
  whose asset backfill Dagster runs in order, one run per partition, launched over GraphQL on a real
  `dagster dev` (webserver + daemon) and timed from launch to the backfill's completion.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request
from datetime import date, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

TRIVIAL_SQL = "-- A trivial table for the backfill benchmark.\nSELECT id, id * 2 AS doubled, '${dt}' AS day FROM range(1000)\n"

OURS = textwrap.dedent(
    """
    import json, sys, time
    from dagster import AssetKey, DagsterInstance, materialize
    from sharp_dagster.definitions import defs
    from sharp_dagster.spark.tables import TableRef
    first, last, keys = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    spark_res = defs.resources["spark"]
    store = spark_res.store()                      # Spark started before the clock
    spark = spark_res.session()
    spark.sql("SELECT 1").collect()
    t0 = time.perf_counter()
    result = materialize(list(defs.assets), selection=[AssetKey(["ods", "trivial"])], instance=DagsterInstance.ephemeral(),
                         resources=defs.resources,
                         tags={"dagster/asset_partition_range_start": first, "dagster/asset_partition_range_end": last})
    ours = time.perf_counter() - t0
    assert result.success
    from sharp_dagster.definitions import CATALOG
    table = CATALOG.get("ods/trivial")
    ref = TableRef("bare", "trivial")
    t0 = time.perf_counter()
    for k in keys:
        store.write_partition(ref, {"dt": k}, spark.sql(table.render(k)))
    bare = time.perf_counter() - t0
    print(json.dumps({"ours_s": ours, "bare_spark_s": bare}))
    """
)

NATIVE_DEFS = textwrap.dedent(
    """
    from dagster import (AssetDep, DailyPartitionsDefinition, Definitions, TimeWindowPartitionMapping, asset,
                         in_process_executor)
    from sharp_dagster.settings import Settings
    from sharp_dagster.spark.session import build_spark_session
    from sharp_dagster.spark.iceberg import warehouse_tables
    from sharp_dagster.spark.tables import TableRef

    daily = DailyPartitionsDefinition(start_date="2024-01-01")

    @asset(partitions_def=daily, deps=[AssetDep("trivial_native",
           partition_mapping=TimeWindowPartitionMapping(start_offset=-1, end_offset=-1))])
    def trivial_native(context):
        settings = Settings.from_env()
        spark = build_spark_session(settings)
        store = warehouse_tables(spark, settings)
        dt = context.partition_key
        store.write_partition(TableRef("native", "trivial"), {"dt": dt},
                              spark.sql(f"SELECT id, id * 2 AS doubled, '{dt}' AS day FROM range(1000)"))

    defs = Definitions(assets=[trivial_native], executor=in_process_executor)
    """
)

LAUNCH = """mutation($params: LaunchBackfillParams!) { launchPartitionBackfill(backfillParams: $params) {
  __typename ... on LaunchBackfillSuccess { backfillId } ... on PythonError { message } } }"""
STATUS = """query($id: String!) { partitionBackfillOrError(backfillId: $id) { __typename
  ... on PartitionBackfill { status } ... on PythonError { message } } }"""


def graphql(url: str, query: str, variables: dict) -> dict:
    req = urllib.request.Request(
        f"{url}/graphql",
        data=json.dumps({"query": query, "variables": variables}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        body = json.loads(resp.read())
    if "errors" in body:
        raise RuntimeError(body["errors"])
    return body["data"]


def days(n: int) -> list[str]:
    first = date(2024, 1, 1)
    return [(first + timedelta(days=i)).isoformat() for i in range(n)]


def run_ours(n: int, workdir: Path) -> dict:
    sql = workdir / "sql" / "ods"
    sql.mkdir(parents=True)
    (sql / "trivial.sql").write_text(TRIVIAL_SQL)
    env = {
        **os.environ,
        "SHARP_DATA_DIR": str(workdir / "ours"),
        "SHARP_WAREHOUSE_SQL_DIR": str(workdir / "sql"),
    }
    keys = days(n)
    proc = subprocess.run(
        [sys.executable, "-c", OURS, keys[0], keys[-1], json.dumps(keys)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    return {
        "partitions": n,
        "total_s": round(res["ours_s"], 2),
        "bare_spark_s": round(res["bare_spark_s"], 2),
        "per_partition_s": round(res["ours_s"] / n, 3),
        "overhead_per_partition_s": round((res["ours_s"] - res["bare_spark_s"]) / n, 3),
        "target_overhead_per_partition_s": 1.0,
    }


def run_native(n: int, workdir: Path, timeout_s: float) -> dict:
    from sharp_dagster.servers.dagster_dev import DagsterDev

    native = workdir / "native"
    native.mkdir()
    (native / "native_defs.py").write_text(NATIVE_DEFS)
    (native / "workspace.yaml").write_text(f"load_from:\n  - python_file: {native / 'native_defs.py'}\n")
    home = native / "dagster_home"
    home.mkdir()
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "SHARP_DATA_DIR": str(native / "data"),
        "PYTHONPATH": str(REPO),
    }
    with DagsterDev(workspace=native / "workspace.yaml", env=env, cwd=native) as dev:
        params = {
            "partitionNames": days(n),
            "assetSelection": [{"path": ["trivial_native"]}],
            "fromFailure": False,
        }
        t0 = time.monotonic()
        launched = graphql(dev.url, LAUNCH, {"params": params})["launchPartitionBackfill"]
        if launched["__typename"] != "LaunchBackfillSuccess":
            raise RuntimeError(f"backfill not launched: {launched}")
        status = "REQUESTED"
        while time.monotonic() - t0 < timeout_s:
            status = graphql(dev.url, STATUS, {"id": launched["backfillId"]})["partitionBackfillOrError"][
                "status"
            ]
            if status in ("COMPLETED", "COMPLETED_SUCCESS", "COMPLETED_FAILED", "FAILED", "CANCELED"):
                break
            time.sleep(1)
        total = time.monotonic() - t0
    return {
        "partitions": n,
        "status": status,
        "total_s": round(total, 2),
        "per_partition_s": round(total / n, 3),
        "timed_out": status not in ("COMPLETED", "COMPLETED_SUCCESS"),
    }


def run(quick: bool, native_partitions: int | None = None) -> dict:
    n = 5 if quick else 30
    native_n = native_partitions or int(os.environ.get("SHARP_BENCH_NATIVE_PARTITIONS", 3 if quick else 30))
    with tempfile.TemporaryDirectory(prefix="bench_backfill_") as tmp:
        ours = run_ours(n, Path(tmp))
        native = run_native(native_n, Path(tmp), timeout_s=120 * native_n)
    return {
        "ours": ours,
        "native_self_dependent": native,
        "per_partition_ratio_native_over_ours": round(native["per_partition_s"] / ours["per_partition_s"], 1),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--native-partitions", type=int, default=None)
    args = parser.parse_args()
    print(json.dumps(run(args.quick, args.native_partitions), indent=2))
