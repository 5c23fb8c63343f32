"""Benchmark: the production profile (deploy/) against the embedded one, side by side in one run.

1. **Dagster run set-up per run.** The same small job (three chained assets, no Spark) executed `--runs` times
   through `execute_in_process` on Dagster's default SQLite instance and on a PostgreSQL instance built from
   `deploy/dagster.yaml` (a private PostgreSQL server on loopback). Set-up is the time from the call to the run's
   first STEP_START event; the rest of the run is reported too.
2. **The backfill** (`bench_pipeline.py --backfill`: the demo's history in Kafka, one landing run over the range,
   one run of every daily asset over the range) on the embedded profile (local Spark, SQLite, a local warehouse)
   and on the production profile: Dagster's instance, the job log and the Iceberg catalog on PostgreSQL, the
   warehouse on a real HDFS (`sharp_dagster/servers/hdfs.py`) and a Spark standalone cluster of two workers. Both
   on this one machine, so the production figures carry the network hops but none of the extra hardware.

    .venv/bin/python bench/bench_profiles.py [--days 30] [--runs 20] [--quick (= 2 days, 5 runs)]

Prints each part on one line as soon as it finished (`{"part": ...}`), then one JSON object of all as its last
output (bench/run_all.py collects it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

SETUP_SCRIPT = r"""
import json, sys, time
from dagster import DagsterEventType, DagsterInstance, Definitions, asset, define_asset_job

@asset
def a() -> int:
    return 1

@asset
def b(a: int) -> int:
    return a + 1

@asset
def c(b: int) -> int:
    return b + 1

job = Definitions(assets=[a, b, c], jobs=[define_asset_job("three", selection="*")]).resolve_job_def("three")
setup, total = [], []
with DagsterInstance.get() as instance:
    for _ in range(int(sys.argv[1])):
        t0 = time.time()
        result = job.execute_in_process(instance=instance)
        t1 = time.time()
        assert result.success
        starts = instance.all_logs(result.run_id, of_type=DagsterEventType.STEP_START)
        setup.append(min(e.timestamp for e in starts) - t0)
        total.append(t1 - t0)
    storage = type(instance.event_log_storage).__name__
print(json.dumps({"storage": storage, "setup_s": setup, "total_s": total}))
"""


def _last_json(text: str) -> dict:
    """The last JSON object a benchmark printed (bench_pipeline prints it indented, starting at column 0)."""
    start = text.rfind("\n{")
    return json.loads(text[start + 1 :] if start >= 0 else text)


def _run(cmd: list[str], env: dict[str, str], timeout: float) -> dict:
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO)
    if done.returncode != 0:
        raise RuntimeError(f"{cmd[1]} exited with {done.returncode}: {(done.stdout + done.stderr)[-3000:]}")
    return _last_json(done.stdout)


def _part(name: str, result: dict) -> None:
    """One finished part on one line at once: a run stopped early (a busy machine) keeps what it measured."""
    print(
        json.dumps({"part": name, "finished_utc": time.strftime("%H:%M:%S", time.gmtime()), **result}),
        flush=True,
    )


def _dagster_home(folder: Path, production: bool) -> Path:
    folder.mkdir(parents=True)
    if production:
        shutil.copy(REPO / "deploy" / "dagster.yaml", folder / "dagster.yaml")
    else:
        (folder / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    return folder


def _pg_env(pg, database: str) -> dict[str, str]:
    return {
        "DAGSTER_PG_HOST": "127.0.0.1",
        "DAGSTER_PG_PORT": str(pg.port),
        "DAGSTER_PG_DB": database,
        "DAGSTER_PG_USER": "postgres",
        "DAGSTER_PG_PASSWORD": "",
        "DAGSTER_MAX_CONCURRENT_RUNS": "4",
    }


def run_setup(work: Path, pg, runs: int) -> dict:
    """Per-run set-up on SQLite vs PostgreSQL: the same job, each instance in a process of its own, the first
    run (imports, connections) left out."""
    out = {}
    for profile in ("sqlite", "postgres"):
        env = dict(os.environ)
        env["DAGSTER_HOME"] = str(_dagster_home(work / f"setup_{profile}", profile == "postgres"))
        if profile == "postgres":
            env.update(_pg_env(pg, pg.create_database().rsplit("/", 1)[1]))
        r = _run([sys.executable, "-c", SETUP_SCRIPT, str(runs + 1)], env, timeout=1800)
        setup, total = r["setup_s"][1:], r["total_s"][1:]  # the first run warms imports and connections
        out[profile] = {
            "storage": r["storage"],
            "runs": len(setup),
            "setup_s_median": round(statistics.median(setup), 3),
            "run_s_median": round(statistics.median(total), 3),
        }
    out["setup_ratio_postgres_to_sqlite"] = round(
        out["postgres"]["setup_s_median"] / out["sqlite"]["setup_s_median"], 2
    )
    return out


def backfill(work: Path, pg, hdfs, cluster, days: int) -> dict:
    """bench_pipeline.py --backfill on each profile, one after the other."""
    script = [sys.executable, str(REPO / "bench" / "bench_pipeline.py"), "--backfill", "--days", str(days)]
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SHARP_", "DAGSTER_"))}
    out = {}
    t0 = time.monotonic()
    out["embedded"] = _run(script, {**base, "SHARP_SPARK_MASTER": "local[2]"}, timeout=7200)
    out["embedded"]["wall_process_s"] = round(time.monotonic() - t0, 1)
    _part("backfill_embedded", out["embedded"])
    production = {
        **base,
        **_pg_env(pg, pg.create_database().rsplit("/", 1)[1]),
        "DAGSTER_HOME": str(_dagster_home(work / "backfill_production", True)),
        "SHARP_WAREHOUSE_DIR": f"{hdfs.uri}/bench/warehouse",
        "SHARP_LOG_DB_URL": pg.create_database(),
        "SHARP_SPARK_MASTER": cluster.master_url,
        # Two executors of one core (one per worker): the embedded run's local[2] has two cores too.
        "SHARP_SPARK_CONF": "spark.executor.memory=1g,spark.executor.cores=1,spark.cores.max=2",
    }
    t0 = time.monotonic()
    out["production"] = _run([*script, "--profile-from-env"], production, timeout=7200)
    out["production"]["wall_process_s"] = round(time.monotonic() - t0, 1)
    _part("backfill_production", out["production"])
    keys = ("s_per_asset_partition", "run_setup_s_median", "wall_s", "asset_partitions", "runs")
    out["side_by_side"] = {k: {p: out[p].get(k) for p in ("embedded", "production")} for k in keys}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--runs", type=int, default=20, help="runs per instance for the set-up measure")
    parser.add_argument(
        "--quick", action="store_true", help="2 days and 5 runs: a smoke test of the benchmark"
    )
    args = parser.parse_args(argv)
    days, runs = (2, 5) if args.quick else (args.days, args.runs)

    from sharp_dagster.servers.hdfs import LocalHdfs
    from sharp_dagster.servers.spark_cluster import SparkStandaloneCluster
    from sharp_dagster_tests.joblog.pgserver import PostgresServer

    work = Path(tempfile.mkdtemp(prefix="bench_profiles_"))
    out: dict = {"days": days, "runs_per_instance": runs}
    pg = PostgresServer().start()
    try:
        out["run_setup"] = run_setup(work, pg, runs)
        _part("run_setup", out["run_setup"])
        with (
            LocalHdfs(base_dir=work / "hdfs") as hdfs,
            SparkStandaloneCluster(base_dir=work / "spark", cores=1, memory="1500m", workers=2) as cluster,
        ):
            out["backfill"] = backfill(work, pg, hdfs, cluster, days)
    finally:
        pg.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
