"""Benchmark of a Spark driver's start with and without the class-data-sharing archive (`spark/class_archive.py`).

Every process that runs Spark (a Dagster run worker, a CLI command, a test's subprocess) starts a driver JVM that
loads thousands of classes from Spark's and Iceberg's jars. The bootstrap writes them once into a JDK class-data-sharing
archive (`jvm/lib/cds/spark-driver.jsa`) and every driver maps it. Each start here is a fresh process: the session
built by `build_spark_session` (its driver options given with or without the archive's), then what a warehouse step
does first (the JDBC catalog's namespace, an Iceberg table created, written and read). Measured: the wall time to
the session and of that first work, and the CPU of the driver JVM (its utime + stime in /proc, read at the end)
and of the Python process. The two kinds alternate, `--rounds` times each, with the archive first in odd rounds.

    .venv/bin/python bench/bench_driver_start.py [--quick] [--rounds N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sharp_dagster.spark import class_archive

REPO = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, os, resource, sys, time
t0 = time.perf_counter()
from sharp_dagster.spark.session import build_spark_session, driver_java_options

options = driver_java_options(archive=sys.argv[1] == "archive")
spark = build_spark_session(**{"spark.driver.extraJavaOptions": options})
t1 = time.perf_counter()
spark.sql("CREATE NAMESPACE IF NOT EXISTS bench")
spark.sql("CREATE TABLE bench.t (id BIGINT, v STRING) USING iceberg")
spark.sql("INSERT INTO bench.t VALUES (1, 'a'), (2, 'b')")
rows = spark.sql("SELECT count(*) FROM bench.t").collect()[0][0]
t2 = time.perf_counter()
pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
jvm_cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime of the driver JVM
own = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"start_s": round(t1 - t0, 2), "first_work_s": round(t2 - t1, 2), "rows": rows,
                  "jvm_cpu_s": round(jvm_cpu, 2),
                  "python_cpu_s": round(own.ru_utime + own.ru_stime, 2)}))
"""


def one_start(kind: str) -> dict:
    env = dict(os.environ)
    env["SHARP_DATA_DIR"] = tempfile.mkdtemp(prefix="bench_driver_start_")
    for var in ("SHARP_SPARK_CONF", "SHARP_WAREHOUSE_DIR", "SHARP_LOG_DB_URL", "SHARP_SPARK_MASTER"):
        env.pop(var, None)
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, kind], cwd=REPO, env=env, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise RuntimeError(f"driver start failed ({kind}): {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if not class_archive.archive_path().is_file():
        sys.exit(f"no archive at {class_archive.archive_path()}: run scripts/bootstrap.sh")
    rounds = 1 if args.quick else args.rounds
    runs: dict[str, list[dict]] = {"archive": [], "plain": []}
    load = [round(os.getloadavg()[0], 2)]
    for r in range(rounds):
        for kind in ("archive", "plain") if r % 2 == 0 else ("plain", "archive"):
            runs[kind].append(one_start(kind))
            print(kind, runs[kind][-1], file=sys.stderr)
    load.append(round(os.getloadavg()[0], 2))
    result: dict = {"rounds": rounds, "archive_bytes": class_archive.archive_path().stat().st_size}
    for kind, got in runs.items():
        result[kind] = {
            key: {"values": [g[key] for g in got], "median": statistics.median(g[key] for g in got)}
            for key in ("start_s", "first_work_s", "jvm_cpu_s", "python_cpu_s")
        }
    a, p = result["archive"], result["plain"]
    result["ratio_start_wall"] = round(a["start_s"]["median"] / p["start_s"]["median"], 3)
    result["ratio_first_work_wall"] = round(a["first_work_s"]["median"] / p["first_work_s"]["median"], 3)
    result["ratio_jvm_cpu"] = round(a["jvm_cpu_s"]["median"] / p["jvm_cpu_s"]["median"], 3)
    result["load_avg_1m_start_end"] = load
    result["ran_at_utc"] = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
