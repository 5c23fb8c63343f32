"""Benchmark of the daily binlog merge: merge_day + write against a plain copy of the same state, and DuckDB.

A state of N rows (parquet) and M raw binlog changes (60% updates, half of them partial images, 25% inserts, 15%
deletes, 1% duplicated deliveries) are generated once. Then, in one Spark session, after a warm-up: a plain copy
of the state (read + write parquet, what `INSERT OVERWRITE ... SELECT *` does) and `merge_day` + write are timed,
alternately, and the best of each is kept. The same merge in DuckDB (SQL over the same parquet files) is the
reference, and its result must equal Spark's, row for row. A lower bound is timed alongside (`floor_parts`): the
parts any Spark merge must do, each alone (the copy with a lookup or a shuffle of the state, a second look at the
state's keys, one parse of every change grouped by key).

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

from sharp_dagster.cdc.binlog_schema import FILE_FACTOR, POS_FACTOR
from sharp_dagster.cdc.merge import merge_day
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


def generate(rows: int, changes: int, state_dir: str, changes_dir: str) -> None:
    """Write the state (file 1 of the binlog) and the day's changes (file 2) as parquet, with DuckDB (fast)."""
    import duckdb

    for folder in (state_dir, changes_dir):
        Path(folder).parent.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect()
    con.execute("SET threads = 2")
    con.execute("SET enable_progress_bar = false")
    con.execute(f"""
        COPY (
            SELECT id::BIGINT AS id,
                   'customer-' || id AS name,
                   ((id % 100000) / 100)::DECIMAL(12,2) AS amount,
                   (id % 1000)::INTEGER AS qty,
                   ['NEW', 'PAID', 'SENT', 'DONE'][id % 4 + 1] AS status,
                   to_timestamp(1700000000 + id % 86400) AS updated_at,
                   sha1(id::VARCHAR) AS note,
                   ({FILE_FACTOR}::DECIMAL(38,0) + id)::DECIMAL(38,0) AS _binlog_seq,
                   false AS _is_deleted
            FROM range({rows}) t(id)
        ) TO '{state_dir}' (FORMAT parquet, FILE_SIZE_BYTES '40MB', OVERWRITE_OR_IGNORE true)
    """)
    unique = int(changes / 1.01)
    # 60% updates (half with a full image, half partial), 15% deletes, 25% inserts of new keys; 1% re-delivered.
    con.execute(f"""
        COPY (
            WITH ev AS (
                SELECT i, h, h2, pos,
                       CASE WHEN h % 100 < 75 THEN h2 % {rows} ELSE {rows} + i END AS target,
                       CASE WHEN h % 100 < 60 THEN 'u' WHEN h % 100 < 75 THEN 'd' ELSE 'c' END AS op
                FROM (SELECT i, hash(i) AS h, hash(i + 7) AS h2, i * 100 + 4 AS pos FROM range({unique}) t(i))
            ),
            raw AS (
                SELECT 'src1' AS source_id,
                       'mysql-bin.000002' AS binlog_file,
                       2::BIGINT AS binlog_file_seq,
                       pos::BIGINT AS binlog_pos,
                       0::INTEGER AS row_idx,
                       (2 * {FILE_FACTOR}::DECIMAL(38,0) + pos * {POS_FACTOR})::DECIMAL(38,0) AS binlog_seq,
                       NULL::VARCHAR AS gtid,
                       sha1('src1|mysql-bin.000002|' || pos || '|0') AS event_uid,
                       (1715000000000 + i)::BIGINT AS event_ts_ms,
                       op,
                       'shop' AS source_db,
                       'orders' AS source_table,
                       ['id'] AS pk_names,
                       CASE WHEN op <> 'c' THEN json_object('id', target)::VARCHAR END AS before_json,
                       CASE WHEN op = 'c' OR (op = 'u' AND h2 % 2 = 0) THEN json_object(
                                'id', target, 'name', 'renamed-' || i,
                                'amount', printf('%.2f', (i % 99999) / 100.0),  -- Canal sends numbers as strings
                                'qty', i % 777, 'status', 'CHANGED', 'updated_at', '2024-05-06 07:08:09',
                                'note', sha1(i::VARCHAR))::VARCHAR
                            WHEN op = 'u' THEN json_object('id', target, 'qty', i % 555, 'status', 'PART')::VARCHAR
                       END AS after_json,
                       NULL::VARCHAR AS ddl_sql,
                       'binlog.shop' AS kafka_topic,
                       0::INTEGER AS kafka_partition,
                       i::BIGINT AS kafka_offset,
                       0::BIGINT AS ingest_ts_ms
                FROM ev
            )
            SELECT * FROM raw
            UNION ALL
            SELECT * REPLACE (kafka_offset + {unique} AS kafka_offset) FROM raw WHERE hash(event_uid) % 100 = 0
        ) TO '{changes_dir}' (FORMAT parquet, FILE_SIZE_BYTES '3MB', OVERWRITE_OR_IGNORE true)
    """)
    con.close()


class _Clock:
    """Wall and CPU seconds of a Spark action; CPU is the JVM's (driver = executor in local mode), which a busy
    shared machine distorts much less than wall time."""

    def __init__(self, spark: SparkSession):
        self._stat = None
        try:
            pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
            if Path(f"/proc/{pid}/stat").exists():
                self._stat = Path(f"/proc/{pid}/stat")
        except Exception:  # noqa: BLE001 - CPU time is an extra, not a requirement
            self._stat = None

    def cpu(self) -> float:
        if self._stat is None:
            return float("nan")
        fields = self._stat.read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def time(self, action) -> tuple[float, float]:
        wall, cpu = time.perf_counter(), self.cpu()
        action()
        return time.perf_counter() - wall, self.cpu() - cpu


def spark_copy(spark: SparkSession, clock: _Clock, state_dir: str, out: str) -> tuple[float, float]:
    return clock.time(lambda: spark.read.parquet(state_dir).write.mode("overwrite").parquet(out))


def spark_merge(
    spark: SparkSession, clock: _Clock, state_dir: str, changes_dir: str, out: str, strategy: str = "auto"
) -> tuple[float, float]:
    def action() -> None:
        state, changes = spark.read.parquet(state_dir), spark.read.parquet(changes_dir)
        merge_day(state, changes, ["id"], strategy=strategy).write.mode("overwrite").parquet(out)

    return clock.time(action)


def floor_parts(spark: SparkSession, clock: _Clock, state_dir: str, changes_dir: str, out: str) -> dict:
    """The parts any Spark merge of this day must do, each timed alone with nothing else added (a lower bound).

    - probe + write: the copy plus one hash lookup of every state row among the day's keys (computed beforehand,
      not timed), the least a merge that streams the state past the broadcast delta does to it.
    - new keys: the state's keys looked up among the day's keys once more. Spark's broadcast hash join cannot
      return the build rows nothing matched, so finding the day's keys new to the state takes a second look at
      the state's keys (a key-only scan).
    - parse + group: every change's after image and before-image key parsed once, the changes grouped by key
      (no partial images, no ordering beyond one max).
    - shuffle + write: the copy with the state shuffled by key, the least a merge that joins by shuffling the
      state (instead of broadcasting the delta) does to it.
    """
    from pyspark.sql import functions as F

    image = ", ".join(f"`{name}` string" for name, _ in COLUMNS)
    keys = (
        spark.read.parquet(changes_dir)
        .select(F.get_json_object(F.coalesce("after_json", "before_json"), "$.id").cast("bigint").alias("k"))
        .distinct()
        .localCheckpoint(eager=True)
    )

    def probe_write() -> None:
        state = spark.read.parquet(state_dir)
        joined = state.join(F.broadcast(keys), state["id"] == keys["k"], "left").drop("k")
        joined.write.mode("overwrite").parquet(out)

    def new_keys() -> None:
        state_keys = spark.read.parquet(state_dir).select("id")
        matched = state_keys.join(F.broadcast(keys), state_keys["id"] == keys["k"], "left_semi")
        matched.write.format("noop").mode("overwrite").save()

    def parse_group() -> None:
        parsed = spark.read.parquet(changes_dir).select(
            F.from_json("after_json", image).alias("a"),
            F.from_json("before_json", "`id` string").alias("b"),
            "binlog_seq",
        )
        grouped = parsed.groupBy(F.coalesce("a.id", "b.id").alias("k")).agg(F.max_by("a", "binlog_seq"))
        grouped.write.format("noop").mode("overwrite").save()

    def shuffle_write() -> None:
        state = spark.read.parquet(state_dir)
        partitions = int(spark.conf.get("spark.sql.shuffle.partitions"))
        state.repartition(partitions, "id").write.mode("overwrite").parquet(out)

    parts = {
        "probe_write": probe_write,
        "new_keys": new_keys,
        "parse_group": parse_group,
        "shuffle_write": shuffle_write,
    }
    return {name: (lambda action=action: clock.time(action)) for name, action in parts.items()}


def duckdb_merge(state_dir: str, changes_dir: str, out: str) -> tuple[float, float]:
    """The same merge in DuckDB SQL (inserts, full and partial updates, deletes); returns (copy, merge) seconds."""
    import duckdb

    con = duckdb.connect()
    con.execute("SET threads = 2")
    con.execute("SET enable_progress_bar = false")
    con.execute("SET TimeZone = 'UTC'")
    state = f"read_parquet('{state_dir}/*.parquet')"
    changes = f"read_parquet('{changes_dir}/*.parquet')"
    start = time.perf_counter()
    con.execute(f"COPY (SELECT * FROM {state}) TO '{out}_copy.parquet' (FORMAT parquet)")
    copy_seconds = time.perf_counter() - start

    values = [(c, t) for c, t in COLUMNS if c != "id"]
    extract = ",\n".join(
        f"json_extract(after_json, '$.{c}') IS NOT NULL AS p_{c}, "
        f"CAST(json_extract_string(after_json, '$.{c}') AS {_duck_type(t)}) AS v_{c}"
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
                WHEN {applies} THEN d.r['del'] ELSE coalesce(b._is_deleted, false) END AS _is_deleted
    FROM {state} b FULL OUTER JOIN d ON b.id = d.id
    """
    start = time.perf_counter()
    con.execute(f"COPY ({sql}) TO '{out}' (FORMAT parquet)")
    merge_seconds = time.perf_counter() - start
    con.close()
    return copy_seconds, merge_seconds


def _duck_type(spark_type: str) -> str:
    # Spark's timestamp is an instant (parquet isAdjustedToUTC), DuckDB's TIMESTAMPTZ.
    return "TIMESTAMPTZ" if spark_type == "timestamp" else spark_type.upper()


def compare_with_duckdb(spark_out: str, duck_out: str) -> dict[str, int]:
    """Rows in one result and not the other (both ways; 0 and 0 means equal as multisets)."""
    import duckdb

    con = duckdb.connect()
    cols = ", ".join(c for c, _ in COLUMNS) + ", CAST(_binlog_seq AS DECIMAL(38,0)) AS s, _is_deleted"
    a = f"SELECT {cols} FROM read_parquet('{spark_out}/*.parquet')"
    b = f"SELECT {cols} FROM read_parquet('{duck_out}')"
    only_spark = con.execute(f"SELECT count(*) FROM ({a} EXCEPT ALL {b})").fetchone()[0]
    only_duck = con.execute(f"SELECT count(*) FROM ({b} EXCEPT ALL {a})").fetchone()[0]
    live = con.execute(f"SELECT count(*) FILTER (WHERE NOT _is_deleted), count(*) FROM ({a})").fetchone()
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
        generate(rows, changes, state_dir, changes_dir)
        generate_seconds = time.perf_counter() - start
        change_rows = spark.read.parquet(changes_dir).count()

        # Warm-up: JIT, file system caches.
        clock = _Clock(spark)
        spark_copy(spark, clock, state_dir, str(root / "warm_copy"))
        spark_merge(spark, clock, state_dir, changes_dir, str(root / "warm_merge"))

        floors = floor_parts(spark, clock, state_dir, changes_dir, str(root / "floor"))
        for part in floors.values():
            part()
        copies, merges, parts = [], [], {name: [] for name in floors}
        for _ in range(repeat):  # alternated, so that a burst of load elsewhere hits all alike
            copies.append(spark_copy(spark, clock, state_dir, str(root / "copy")))
            merges.append(spark_merge(spark, clock, state_dir, changes_dir, str(root / "merge")))
            for name, part in floors.items():
                parts[name].append(part())
        copy_s, merge_s = min(w for w, _ in copies), min(w for w, _ in merges)
        copy_cpu, merge_cpu = min(c for _, c in copies), min(c for _, c in merges)
        result = {
            "state_rows": rows,
            "change_rows": change_rows,
            "generate_s": round(generate_seconds, 2),
            "spark_copy_s": round(copy_s, 2),
            "spark_merge_s": round(merge_s, 2),
            "ratio_merge_to_copy": round(merge_s / copy_s, 3),
            "spark_copy_runs_s": [round(w, 2) for w, _ in copies],
            "spark_merge_runs_s": [round(w, 2) for w, _ in merges],
            "spark_copy_cpu_s": round(copy_cpu, 2),
            "spark_merge_cpu_s": round(merge_cpu, 2),
            "cpu_ratio_merge_to_copy": round(merge_cpu / copy_cpu, 3),
            "load_average_1m": round(os.getloadavg()[0], 2),
        }
        floor = {name: min(w for w, _ in runs) for name, runs in parts.items()}
        for name, seconds in floor.items():
            result[f"floor_{name}_s"] = round(seconds, 2)
        # The least any Spark merge of this day costs here, against the same copy: above 1.3, no merge meets 1.3.
        broadcast_floor = floor["probe_write"] + floor["new_keys"] + floor["parse_group"]
        shuffle_floor = floor["shuffle_write"] + floor["parse_group"]
        result["floor_broadcast_ratio_to_copy"] = round(broadcast_floor / copy_s, 3)
        result["floor_shuffle_ratio_to_copy"] = round(shuffle_floor / copy_s, 3)
        result["floor_ratio_to_copy"] = round(min(broadcast_floor, shuffle_floor) / copy_s, 3)
        if variants:
            shuffled, _ = spark_merge(
                spark, clock, state_dir, changes_dir, str(root / "merge_shuffle"), strategy="shuffle"
            )
            result["spark_merge_shuffle_s"] = round(shuffled, 2)
            result["ratio_shuffle_to_copy"] = round(shuffled / copy_s, 3)
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
    parser.add_argument("--repeat", type=int, help="timed runs of each (default 3, quick 1)")
    parser.add_argument(
        "--variants", action="store_true", help="also time the shuffle (full outer join) strategy"
    )
    args = parser.parse_args(argv)
    rows = args.rows or (500_000 if args.quick else 5_000_000)
    changes = args.changes or (50_000 if args.quick else 500_000)
    repeat = args.repeat or (1 if args.quick else 3)
    os.environ.setdefault("SHARP_SPARK_LOG_LEVEL", "ERROR")
    result = run(rows, changes, repeat, args.variants or not args.quick)
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    sys.exit(0 if main().get("equal_to_duckdb") else 1)
