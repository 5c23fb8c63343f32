"""Benchmark of writing many small partitions through Hadoop's local file system: Hadoop's own against ours.

Hadoop's `RawLocalFileSystem` without its native library (PySpark ships none) sets the permission of every file
and folder it creates by running `chmod` in a child process. `jvm/localfs` (`io.sharpdagster.hadoop.
PosixLocalFileSystem`, which every session of the project sets as `fs.file.impl`) sets them through java.nio.

What is written is a backfill's landing in miniature: `--rows` rows (default 16,000) appended in one write to an
Iceberg table partitioned like the raw binlog table (table, day, hour), over 4 tables x 30 days x 24 hours = 2,880
partitions: one data file each, written by Iceberg's clustered writer (`iceberg_base.MULTI_PARTITION_WRITE`), as
`bench_pipeline.py --backfill`'s landing does. The file system is a setting of the JVM, so every write runs in a
process of its own (its own Spark session on `local[2]`, its own warehouse); the two file systems alternate,
`--rounds` times each (default 2), ours first in odd rounds and Hadoop's first in even ones.

    .venv/bin/python bench/bench_local_fs.py [--quick] [--rounds N] [--rows N]
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

REPO = Path(__file__).resolve().parent.parent
HADOOP_FS = "org.apache.hadoop.fs.LocalFileSystem"

CHILD = r"""
import json, os, sys, time
from sharp_dagster.resources.spark import SparkResource
from sharp_dagster.spark.tables import TableRef

rows, days = int(sys.argv[1]), int(sys.argv[2])
resource = SparkResource()
spark, store = resource.session(), resource.store()
conf = spark.sparkContext._jsc.hadoopConfiguration()
path = spark.sparkContext._jvm.org.apache.hadoop.fs.Path("file:///")
fs_class = path.getFileSystem(conf).getClass().getName()
ref = TableRef("original_binlog", "bench", ("table_name", "dt", "hour"))
df = spark.range(rows).selectExpr(
    "concat('t', cast(id % 4 as string)) as table_name",
    f"date_format(date_add(date'2024-01-01', cast((id div 4) % {days} as int)), 'yyyy-MM-dd') as dt",
    f"lpad(cast((id div {4 * days}) % 24 as string), 2, '0') as hour",
    *[f"repeat('x', 200) as c{i}" for i in range(15)],
).localCheckpoint(eager=True)
partitions = df.select("table_name", "dt", "hour").distinct().count()
store.ensure_table(ref, df)
t0 = time.perf_counter()
added = store.append(ref, df)
print(json.dumps({"fs": fs_class, "seconds": round(time.perf_counter() - t0, 2), "rows": added,
                  "partitions": partitions}))
"""


def one_write(ours: bool, rows: int, days: int) -> dict:
    env = dict(os.environ)
    env["SHARP_DATA_DIR"] = tempfile.mkdtemp(prefix="bench_local_fs_")
    env.pop("SHARP_SPARK_CONF", None)
    if not ours:  # a user setting of fs.file.impl leaves Hadoop's own (spark/session.py `_local_fs_conf`)
        env["SHARP_SPARK_CONF"] = f"spark.hadoop.fs.file.impl={HADOOP_FS}"
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(rows), str(days)], cwd=REPO, env=env, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise RuntimeError(f"write failed (ours={ours}): {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 days (288 partitions), 1 round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--rows", type=int, default=16_000)
    args = parser.parse_args()
    days, rounds = (3, 1) if args.quick else (30, args.rounds)
    runs: dict[str, list[dict]] = {"ours": [], "hadoop": []}
    for r in range(rounds):
        order = ("ours", "hadoop") if r % 2 == 0 else ("hadoop", "ours")
        for name in order:
            runs[name].append(one_write(name == "ours", args.rows, days))
            print(name, runs[name][-1], file=sys.stderr)
    result: dict = {"rows": args.rows, "partitions": runs["ours"][0]["partitions"], "rounds": rounds}
    for name, got in runs.items():
        seconds = [g["seconds"] for g in got]
        result[name] = {
            "fs_class": got[0]["fs"],
            "seconds": seconds,
            "median_s": statistics.median(seconds),
            "files_per_s": round(result["partitions"] / statistics.median(seconds), 1),
        }
    result["speedup_ours_over_hadoop"] = round(result["hadoop"]["median_s"] / result["ours"]["median_s"], 2)
    result["load_avg_1m_at_end"] = round(os.getloadavg()[0], 2)
    result["ran_at_utc"] = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
