"""Benchmark of the daily binlog merge: merge_day + write against a plain copy of the same state, and DuckDB.

A state of N rows (parquet) and M raw binlog changes (60% updates, half of them partial images, 25% inserts, 15%
deletes, 1% duplicated deliveries) are generated once. Then, in one Spark session, after a warm-up: a plain copy
of the state (read + write parquet, what `INSERT OVERWRITE ... SELECT *` does) and `merge_day` + write are timed,
alternately, and the best of each is kept. The same merge in DuckDB (SQL over the same parquet files) is the
reference, and its result must equal Spark's, row for row.

    .venv/bin/python bench/bench_merge.py [--quick] [--rows N] [--changes M] [--repeat R] [--variants]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from sharp_dagster.cdc.binlog_schema import FILE_FACTOR, POS_FACTOR, RAW_BINLOG_COLUMNS
from sharp_dagster.cdc.merge import SEQ_TYPE, merge_day
from sharp_dagster.spark.session import build_spark_session

COLUMNS = [
    ("id", "bigint"),
    ("name", "string"),
    ("amount", "decimal(12,2)"),
    ("qty", "int"),
    ("status", "string"),
    ("updated_at", "timestamp"),
    ("note", "string"),
]


def generate(spark: SparkSession, rows: int, changes: int, state_dir: str, changes_dir: str) -> None:
    """Write the state (file 1 of the binlog) and the day's changes (file 2) as parquet."""
    files = max(2, rows // 625_000)
    state = spark.range(0, rows, 1, files).select(
        F.col("id"),
        F.concat(F.lit("customer-"), F.col("id").cast("string")).alias("name"),
        ((F.col("id") % 100_000) / 100).cast("decimal(12,2)").alias("amount"),
        (F.col("id") % 1000).cast("int").alias("qty"),
        F.element_at(
            F.array(*[F.lit(s) for s in ("NEW", "PAID", "SENT", "DONE")]), (F.col("id") % 4 + 1).cast("int")
        ).alias("status"),
        F.timestamp_seconds(F.lit(1_700_000_000) + F.col("id") % 86_400).alias("updated_at"),
        F.sha1(F.col("id").cast("string")).alias("note"),
        (F.lit(FILE_FACTOR).cast(SEQ_TYPE) + F.col("id").cast(SEQ_TYPE)).cast(SEQ_TYPE).alias("_binlog_seq"),
        F.lit(False).alias("_deleted"),
    )
    state.write.mode("overwrite").parquet(state_dir)

    unique = int(changes / 1.01)
    kind = F.col("h") % 100
    target = F.when(kind < 75, F.col("h2") % rows).otherwise(rows + F.col("i"))  # 60% upd, 15% del, 25% ins
    op = F.when(kind < 60, "u").when(kind < 75, "d").otherwise("c")
    full = F.to_json(
        F.struct(
            F.col("target").alias("id"),
            F.concat(F.lit("renamed-"), F.col("i").cast("string")).alias("name"),
            F.format_number(F.col("i") % 99_999 / 100, 2).alias("amount"),  # Canal sends numbers as strings
            (F.col("i") % 777).alias("qty"),
            F.lit("CHANGED").alias("status"),
            F.lit("2024-05-06 07:08:09").alias("updated_at"),
            F.sha1(F.col("i").cast("string")).alias("note"),
        )
    )
    partial = F.to_json(
        F.struct(F.col("target").alias("id"), (F.col("i") % 555).alias("qty"), F.lit("PART").alias("status"))
    )
    before = F.to_json(F.struct(F.col("target").alias("id")))
    pos = F.col("i") * 100 + 4
    events = (
        spark.range(0, unique, 1, 4)
        .withColumnRenamed("id", "i")
        .select("i", F.abs(F.xxhash64("i")).alias("h"), F.abs(F.xxhash64(F.col("i") + 7)).alias("h2"))
        .select("*", target.alias("target"), op.alias("op"))
        .select(
            F.lit("src1").alias("source_id"),
            F.lit("mysql-bin.000002").alias("binlog_file"),
            F.lit(2).cast("bigint").alias("binlog_file_seq"),
            pos.alias("binlog_pos"),
            F.lit(0).alias("row_idx"),
            (F.lit(2 * FILE_FACTOR).cast(SEQ_TYPE) + (pos * POS_FACTOR).cast(SEQ_TYPE))
            .cast(SEQ_TYPE)
            .alias("binlog_seq"),
            F.lit(None).cast("string").alias("gtid"),
            F.sha1(F.concat_ws("|", F.lit("src1"), F.lit("mysql-bin.000002"), pos, F.lit(0))).alias(
                "event_uid"
            ),
            (F.lit(1_715_000_000_000) + F.col("i")).alias("event_ts_ms"),
            F.col("op"),
            F.lit("shop").alias("source_db"),
            F.lit("orders").alias("source_table"),
            F.array(F.lit("id")).alias("pk_names"),
            F.when(F.col("op") != "c", before).alias("before_json"),
            F.when(F.col("op") == "c", full)
            .when((F.col("op") == "u") & (F.col("h2") % 2 == 0), full)
            .when(F.col("op") == "u", partial)
            .alias("after_json"),
            F.lit(None).cast("string").alias("ddl_sql"),
            F.lit("binlog.shop").alias("kafka_topic"),
            F.lit(0).alias("kafka_partition"),
            F.col("i").alias("kafka_offset"),
            F.lit(0).cast("bigint").alias("ingest_ts_ms"),
        )
    )
    duplicates = events.where(F.abs(F.xxhash64("event_uid")) % 100 == 0).withColumn(
        "kafka_offset", F.col("kafka_offset") + unique
    )
    raw = events.unionByName(duplicates).select(*[F.col(n).cast(t) for n, t in RAW_BINLOG_COLUMNS])
    raw.write.mode("overwrite").parquet(changes_dir)


def spark_copy(spark: SparkSession, state_dir: str, out: str) -> float:
    start = time.perf_counter()
    spark.read.parquet(state_dir).write.mode("overwrite").parquet(out)
    return time.perf_counter() - start


def spark_merge(
    spark: SparkSession, state_dir: str, changes_dir: str, out: str, strategy: str = "broadcast"
) -> float:
    start = time.perf_counter()
    merged = merge_day(
        spark.read.parquet(state_dir), spark.read.parquet(changes_dir), ["id"], strategy=strategy
    )
    merged.write.mode("overwrite").parquet(out)
    return time.perf_counter() - start


def duckdb_merge(state_dir: str, changes_dir: str, out: str) -> tuple[float, float]:
    """The same merge in DuckDB SQL (inserts, full and partial updates, deletes); returns (copy, merge) seconds."""
    import duckdb

    con = duckdb.connect()
    con.execute("SET threads = 2")
    state = f"read_parquet('{state_dir}/*.parquet')"
    changes = f"read_parquet('{changes_dir}/*.parquet')"
    start = time.perf_counter()
    con.execute(f"COPY (SELECT * FROM {state}) TO '{out}_copy.parquet' (FORMAT parquet)")
    copy_seconds = time.perf_counter() - start

    values = [(c, t) for c, t in COLUMNS if c != "id"]
    extract = ",\n".join(
        f"json_extract(after_json, '$.{c}') IS NOT NULL AS p_{c}, "
        f"CAST(json_extract_string(after_json, '$.{c}') AS {t.upper()}) AS v_{c}"
        for c, t in values
    )
    reset_struct = ", ".join(f"'{c}': v_{c}" for c, _ in values)
    partial_aggs = ",\n".join(
        f"arg_max(v_{c}, seq) FILTER (WHERE NOT reset AND p_{c}) AS pv_{c}, "
        f"max(seq) FILTER (WHERE NOT reset AND p_{c}) AS ps_{c}"
        for c, _ in values
    )
    floor = "CASE WHEN d.rseq > b._binlog_seq OR (b._binlog_seq IS NULL AND d.rseq IS NOT NULL) THEN d.rseq ELSE b._binlog_seq END"
    applies = "(d.rseq > b._binlog_seq OR (b._binlog_seq IS NULL AND d.rseq IS NOT NULL))"
    final = ",\n".join(
        f"CASE WHEN d.ps_{c} > {floor} OR ({floor} IS NULL AND d.ps_{c} IS NOT NULL) THEN d.pv_{c} "
        f"WHEN {applies} THEN d.r['{c}'] ELSE b.{c} END AS {c}"
        for c, _ in values
    )
    sql = f"""
    WITH ev AS (
        SELECT DISTINCT ON (event_uid) event_uid, op, CAST(binlog_seq AS DECIMAL(38,0)) AS seq,
               CAST(json_extract_string(CASE WHEN op = 'd' THEN before_json ELSE coalesce(after_json, before_json) END, '$.id') AS BIGINT) AS id,
               op <> 'u' AS reset, op = 'd' AS del,
               {extract}
        FROM {changes} WHERE op IN ('c', 'r', 'u', 'd')
    ),
    d AS (
        SELECT id,
               arg_max({{'del': del, {reset_struct}}}, seq) FILTER (WHERE reset) AS r,
               max(seq) FILTER (WHERE reset) AS rseq,
               max(seq) FILTER (WHERE NOT reset) AS pseq,
               {partial_aggs}
        FROM ev GROUP BY id
    )
    SELECT coalesce(b.id, d.id) AS id,
           {final},
           greatest(b._binlog_seq, d.rseq, d.pseq) AS _binlog_seq,
           CASE WHEN d.pseq > {floor} OR ({floor} IS NULL AND d.pseq IS NOT NULL) THEN false
                WHEN {applies} THEN d.r['del'] ELSE coalesce(b._deleted, false) END AS _deleted
    FROM {state} b FULL OUTER JOIN d ON b.id = d.id
    """
    start = time.perf_counter()
    con.execute(f"COPY ({sql}) TO '{out}' (FORMAT parquet)")
    merge_seconds = time.perf_counter() - start
    con.close()
    return copy_seconds, merge_seconds


def compare_with_duckdb(spark_out: str, duck_out: str) -> dict[str, int]:
    """Rows in one result and not the other (both ways; 0 and 0 means equal as multisets)."""
    import duckdb

    con = duckdb.connect()
    cols = ", ".join(c for c, _ in COLUMNS) + ", CAST(_binlog_seq AS DECIMAL(38,0)) AS s, _deleted"
    a = f"SELECT {cols} FROM read_parquet('{spark_out}/*.parquet')"
    b = f"SELECT {cols} FROM read_parquet('{duck_out}')"
    only_spark = con.execute(f"SELECT count(*) FROM ({a} EXCEPT ALL {b})").fetchone()[0]
    only_duck = con.execute(f"SELECT count(*) FROM ({b} EXCEPT ALL {a})").fetchone()[0]
    live = con.execute(f"SELECT count(*) FILTER (WHERE NOT _deleted), count(*) FROM ({a})").fetchone()
    con.close()
    return {
        "only_in_spark": only_spark,
        "only_in_duckdb": only_duck,
        "result_live_rows": live[0],
        "result_state_rows": live[1],
    }


def run(rows: int, changes: int, repeat: int, variants: bool, workdir: str | None = None) -> dict:
    own_dir = workdir is None
    root = Path(workdir or tempfile.mkdtemp(prefix="bench_merge_"))
    state_dir, changes_dir = str(root / "state"), str(root / "changes")
    spark = build_spark_session(app_name="bench_merge", **{"spark.driver.memory": "6g"})
    try:
        start = time.perf_counter()
        generate(spark, rows, changes, state_dir, changes_dir)
        generate_seconds = time.perf_counter() - start
        change_rows = spark.read.parquet(changes_dir).count()

        # Warm-up: JIT, file system caches, Python workers.
        spark_copy(spark, state_dir, str(root / "warm_copy"))
        spark_merge(spark, state_dir, changes_dir, str(root / "warm_merge"))

        copies, merges = [], []
        for _ in range(repeat):
            copies.append(spark_copy(spark, state_dir, str(root / "copy")))
            merges.append(spark_merge(spark, state_dir, changes_dir, str(root / "merge")))
        result = {
            "state_rows": rows,
            "change_rows": change_rows,
            "generate_s": round(generate_seconds, 2),
            "spark_copy_s": round(min(copies), 2),
            "spark_merge_s": round(min(merges), 2),
            "spark_copy_runs_s": [round(t, 2) for t in copies],
            "spark_merge_runs_s": [round(t, 2) for t in merges],
        }
        result["ratio_merge_to_copy"] = round(min(merges) / min(copies), 3)
        if variants:
            shuffled = spark_merge(
                spark, state_dir, changes_dir, str(root / "merge_shuffle"), strategy="shuffle"
            )
            result["spark_merge_shuffle_s"] = round(shuffled, 2)
            result["ratio_shuffle_to_copy"] = round(shuffled / min(copies), 3)
        duck_copy, duck_merge = duckdb_merge(state_dir, changes_dir, str(root / "duck_merge.parquet"))
        result["duckdb_copy_s"] = round(duck_copy, 2)
        result["duckdb_merge_s"] = round(duck_merge, 2)
        result["duckdb_ratio_merge_to_copy"] = round(duck_merge / duck_copy, 3)
        result.update(compare_with_duckdb(str(root / "merge"), str(root / "duck_merge.parquet")))
        result["equal_to_duckdb"] = result["only_in_spark"] == 0 and result["only_in_duckdb"] == 0
        return result
    finally:
        if own_dir:
            shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="500,000 state rows and 50,000 changes")
    parser.add_argument("--rows", type=int, help="state rows (default 5,000,000)")
    parser.add_argument("--changes", type=int, help="change rows (default 500,000)")
    parser.add_argument("--repeat", type=int, help="timed runs of each (default 2, quick 1)")
    parser.add_argument(
        "--variants", action="store_true", help="also time the shuffle (full outer join) strategy"
    )
    args = parser.parse_args(argv)
    rows = args.rows or (500_000 if args.quick else 5_000_000)
    changes = args.changes or (50_000 if args.quick else 500_000)
    repeat = args.repeat or (1 if args.quick else 2)
    os.environ.setdefault("SHARP_SPARK_LOG_LEVEL", "ERROR")
    result = run(rows, changes, repeat, args.variants or not args.quick)
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    sys.exit(0 if main().get("equal_to_duckdb") else 1)
