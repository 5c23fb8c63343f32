"""Benchmark of the per-partition publish overhead: Iceberg write-audit-publish against plain writes of the rows.

One Spark session on `local[2]`, one Iceberg catalog added to it with `catalog_conf(settings, make_default=False)`
+ `apply_catalog_conf` (a JDBC catalog in a temporary SQLite file, as the pipeline keeps it in the job log's
database). For each size (default 1,000 and 100,000 rows; `--quick` 1,000 and 10,000) the same rows of
`--partitions` days (default 20) are written five ways, each into a table of its own, after a warm-up of 5
partitions of every method and size; sizes and methods are interleaved partition by partition (the order of the
methods rotates each partition so none always runs first):

- `wap`: the pipeline's cycle (`IcebergTables`): `stage` (branch cut at `main`, `overwritePartitions()` on the
  branch) → an audit of the staged rows (`read_staged`, one aggregate of 6 measures, as a data-quality scan does)
  → `publish` (cherry-pick onto `main`, branch dropped, one metadata commit);
- `wap_no_shuffle`: the same cycle on a table created with `write.distribution-mode=none` (see below);
- `iceberg_overwrite`: `df.writeTo(table).overwritePartitions()` straight to `main` of an Iceberg table;
- `iceberg_overwrite_no_shuffle`: the same with the write option `distribution-mode=none`: the rows of one
  partition need no shuffle by partition before the write (Iceberg's default for a partitioned table is `hash`,
  an extra shuffle and, under adaptive execution, an extra Spark job);
- `parquet_overwrite`: `df.write.mode("overwrite").parquet(<table>/dt=<day>)`.

Reported per method and size: seconds per partition (min / median / max), Spark jobs per partition (job groups
counted with `statusTracker`), metadata files written per partition, and the ratios of the medians. The `wap`
cycle is broken into its parts by timing `IcebergTables`' own calls of one instance (outermost calls only, so
nothing is counted twice): the branch cut, the table-exists check, the write (the rest of `stage`), the audit
scan, the publish commit, and the catalog refreshes and table loads around them.

    .venv/bin/python bench/bench_publish.py [--quick] [--partitions N] [--sizes 1000,100000]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

METHODS = ("wap", "wap_no_shuffle", "iceberg_overwrite", "iceberg_overwrite_no_shuffle", "parquet_overwrite")
WARMUP_PARTITIONS = 5


@dataclass(frozen=True)
class _Settings:
    """What `catalog_conf` reads from the project's settings."""

    warehouse_dir: Path
    log_db_url: str


def rows(spark, n: int, seed: int):
    """n rows of an order-like table (the partition column is set by the writer)."""
    from pyspark.sql import functions as F

    return spark.range(n).select(
        (F.col("id") + seed * 10_000_000).alias("order_id"),
        (F.col("id") % 997).alias("user_id"),
        ((F.col("id") * 37 + seed) % 100_000 / 100).cast("decimal(12,2)").alias("amount"),
        F.element_at(
            F.array(F.lit("created"), F.lit("paid"), F.lit("shipped")), (F.col("id") % 3 + 1).cast("int")
        ).alias("status"),
        F.timestamp_seconds(F.lit(1_704_067_200) + F.col("id") % 86_400).alias("updated_at"),
    )


def audit(df) -> list:
    """One aggregate over the staged rows, like a data-quality scan of a handful of rules."""
    from pyspark.sql import functions as F

    return df.agg(
        F.count(F.lit(1)).alias("rows"),
        F.sum(F.when(F.col("order_id").isNull(), 1).otherwise(0)).alias("null_keys"),
        F.sum(F.when(F.col("amount") < 0, 1).otherwise(0)).alias("negative_amounts"),
        F.sum(F.when(~F.col("status").isin("created", "paid", "shipped"), 1).otherwise(0)).alias(
            "bad_status"
        ),
        F.min("updated_at").alias("first"),
        F.max("updated_at").alias("last"),
    ).collect()


class PartTimer:
    """Times the outermost calls of some methods of one object, by `<phase>.<category>`, into the current bucket."""

    def __init__(self, obj, categories: dict[str, str]):
        self.bucket: dict[str, float] | None = None
        self.phase = ""
        self.depth = 0
        for method, category in categories.items():
            setattr(obj, method, self._wrap(getattr(obj, method), category))

    def _wrap(self, fn, category: str):
        @functools.wraps(fn)
        def timed(*args, **kwargs):
            if self.depth or self.bucket is None:
                return fn(*args, **kwargs)
            self.depth += 1
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.depth -= 1
                self.bucket[f"{self.phase}.{category}"] += time.perf_counter() - t0

        return timed

    def time(self, phase: str, fn, *args, **kwargs):
        self.phase = phase
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            self.bucket[f"{phase}.total"] += time.perf_counter() - t0


def wap_parts(b: dict[str, float]) -> dict[str, float]:
    """The WAP cycle of one partition in its parts (they add up to its total, less a little Python)."""
    others = ("ref_commit", "exists_check", "refresh", "table_load")
    return {
        "branch_cut": b["stage.ref_commit"],
        "exists_check": b["stage.exists_check"],
        "write": b["stage.total"] - sum(b[f"stage.{k}"] for k in others),
        "audit_scan": b["audit.total"] - b["audit.refresh"] - b["audit.table_load"],
        "publish_commit": b["publish.ref_commit"],
        "refreshes": sum(b[f"{p}.refresh"] for p in ("stage", "audit", "publish")),
        "table_loads": sum(b[f"{p}.table_load"] for p in ("stage", "audit", "publish")),
    }


def summary(values: list[float]) -> dict:
    return {
        "min_s": round(min(values), 4),
        "median_s": round(statistics.median(values), 4),
        "max_s": round(max(values), 4),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="5 partitions of 1,000 and 10,000 rows")
    parser.add_argument("--partitions", type=int, default=None)
    parser.add_argument("--sizes", default=None, help="comma-separated row counts per partition")
    args = parser.parse_args(argv)
    n_parts = args.partitions or (5 if args.quick else 20)
    sizes = [int(s) for s in (args.sizes or ("1000,10000" if args.quick else "1000,100000")).split(",")]

    work = Path(tempfile.mkdtemp(prefix="bench_publish_"))
    os.environ["SHARP_DATA_DIR"] = str(work / "data")
    os.environ.setdefault("SHARP_SPARK_MASTER", "local[2]")
    from sharp_dagster.spark.catalog import apply_catalog_conf, catalog_conf
    from sharp_dagster.spark.iceberg import IcebergTables
    from sharp_dagster.spark.iceberg_base import TABLE_PROPERTIES
    from sharp_dagster.spark.session import build_spark_session
    from sharp_dagster.spark.tables import TableRef

    try:
        spark = build_spark_session(app_name="bench_publish")
        settings = _Settings(work / "warehouse", f"sqlite:///{work / 'catalog.db'}")
        catalog = "bench_publish"
        apply_catalog_conf(spark, catalog_conf(settings, catalog=catalog, make_default=False))
        tables = IcebergTables(spark, catalog)
        sc = spark.sparkContext
        parts = PartTimer(
            tables,
            {
                "commit_refs": "ref_commit",  # branch cut in stage, cherry-pick + branch drop in publish
                "ensure_table": "exists_check",
                "refresh": "refresh",
                "java_table": "table_load",
            },
        )
        first_day = date(2024, 1, 1)

        def run(method: str, size: int, i: int, tag: str) -> dict[str, float]:
            """One partition by one method; returns its total seconds and, for `wap`, its timed parts."""
            from pyspark.sql import functions as F

            ref = TableRef(f"b{size}_{tag}", method)
            dt = (first_day + timedelta(days=i)).isoformat()
            df = rows(spark, size, i)
            if method in ("wap", "iceberg_overwrite", "iceberg_overwrite_no_shuffle") and i == 0:
                tables.ensure_table(ref, df.withColumn("dt", F.lit(dt)))  # as `stage` would, before the clock
            if method == "wap_no_shuffle" and i == 0:  # the table `stage` would create, plus the property
                spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog}.{ref.database}")
                writer = df.withColumn("dt", F.lit(dt)).limit(0).writeTo(tables.name(ref)).using("iceberg")
                for key, value in {**TABLE_PROPERTIES, "write.distribution-mode": "none"}.items():
                    writer = writer.tableProperty(key, value)
                writer.partitionedBy(F.col("dt")).create()
            bucket: dict[str, float] = defaultdict(float)
            sc.setJobGroup(f"{method}_{size}_{tag}", method)
            t0 = time.perf_counter()
            if method.startswith("wap"):
                parts.bucket = bucket
                try:
                    staged = parts.time("stage", tables.stage, ref, {"dt": dt}, df, token=f"{tag}_{size}_{i}")
                    verdict = parts.time("audit", lambda: audit(tables.read_staged(staged)))
                    parts.time("publish", tables.publish, staged)
                finally:
                    parts.bucket = None
                assert verdict[0]["rows"] == size, verdict
            elif method == "iceberg_overwrite":
                df.withColumn("dt", F.lit(dt)).writeTo(tables.name(ref)).overwritePartitions()
            elif method == "iceberg_overwrite_no_shuffle":
                writer = df.withColumn("dt", F.lit(dt)).writeTo(tables.name(ref))
                writer.option("distribution-mode", "none").overwritePartitions()
            else:
                df.write.mode("overwrite").parquet(
                    str(work / "parquet" / ref.database / ref.name / f"dt={dt}")
                )
            total = time.perf_counter() - t0
            sc.setLocalProperty("spark.jobGroup.id", None)
            return {"total": total, **(wap_parts(bucket) if method.startswith("wap") else {})}

        for size in sizes:  # warm-up: JIT, the catalog's first loads, the first table of each method
            for i in range(WARMUP_PARTITIONS):
                for method in METHODS:
                    run(method, size, i, "warm")

        out: dict = {
            "partitions": n_parts,
            "sizes": sizes,
            "spark_cores": sc.defaultParallelism,
            "catalog": "Iceberg JDBC catalog in SQLite",
        }
        # Sizes and methods interleaved partition by partition: a drift of the shared machine's speed hits all alike.
        timings = {size: {m: [] for m in METHODS} for size in sizes}
        for i in range(n_parts):
            order = METHODS[i % len(METHODS) :] + METHODS[: i % len(METHODS)]
            for size in sizes:
                for method in order:
                    timings[size][method].append(run(method, size, i, "run"))
        tracker = sc.statusTracker()
        for size in sizes:
            res: dict = {}
            for method in METHODS:
                totals = [t["total"] for t in timings[size][method]]
                jobs = len(tracker.getJobIdsForGroup(f"{method}_{size}_run"))
                entry = {**summary(totals), "spark_jobs_per_partition": round(jobs / n_parts, 2)}
                if method != "parquet_overwrite":
                    meta = work / "warehouse" / f"b{size}_run" / method / "metadata"
                    written = len(list(meta.glob("*.metadata.json"))) - 1  # less the table's creation
                    entry["metadata_json_per_partition"] = round(written / n_parts, 2)
                res[method] = entry
            wap = timings[size]["wap"]
            keys = [k for k in wap[0] if k != "total"]
            res["wap_parts_median_s"] = {k: round(statistics.median(t[k] for t in wap), 4) for k in keys}
            res["wap_parts_share_of_median"] = {
                k: round(v / max(res["wap"]["median_s"], 1e-9), 3)
                for k, v in res["wap_parts_median_s"].items()
            }
            med = {m: res[m]["median_s"] for m in METHODS}
            res["ratio_wap_to_iceberg_overwrite"] = round(med["wap"] / med["iceberg_overwrite"], 2)
            res["ratio_wap_to_parquet_overwrite"] = round(med["wap"] / med["parquet_overwrite"], 2)
            res["ratio_iceberg_overwrite_to_parquet_overwrite"] = round(
                med["iceberg_overwrite"] / med["parquet_overwrite"], 2
            )
            res["ratio_wap_no_shuffle_to_wap"] = round(med["wap_no_shuffle"] / med["wap"], 2)
            res["ratio_iceberg_overwrite_no_shuffle_to_iceberg_overwrite"] = round(
                med["iceberg_overwrite_no_shuffle"] / med["iceberg_overwrite"], 2
            )
            res["wap_overhead_over_iceberg_overwrite_s"] = round(med["wap"] - med["iceberg_overwrite"], 4)
            out[f"rows_{size}"] = res
            print(f"rows {size}:", json.dumps(res), flush=True)
        print(json.dumps(out, indent=2))
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
