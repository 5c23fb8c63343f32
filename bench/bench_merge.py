"""Benchmark of the daily binlog merge on Iceberg: ours against a plain copy and the merges a user would pick instead.

Data (generated once per size, untimed): a state of N rows (the Iceberg table `ods_state.orders`, partition of the
previous day, every row live, stamped with a position in binlog file 1) and N/10 changes of the day in binlog
file 2 (10 % inserts of new keys, 5 % deletes, 2 % key-changing updates, the rest updates of state keys, half of
them partial images; 1 % re-delivered; positions with several rows each and many events per millisecond, so that
time ties and only the binlog position orders). The changes are generated as raw JSON binlog rows (Canal's
all-strings values) with DuckDB and typed once by the production landing code (`image_tables.write_typed_images`,
typed by the state's columns): the day's typed images, as the merge reads them in production.

Timed in one Spark session, after a warm-up, alternately, each R times (best and median kept):

- `copy`: the state partition read and written as a new partition of another Iceberg table, through the same
  stage + publish path the pipeline writes with (`IcebergTables.write_partition`);
- `ours`: `merge_day(state, typed images)` + the same write of the new state (tombstones kept);
- `merge_into`: Iceberg's own `MERGE INTO` of the day's changes, deduplicated to one row per key, into a
  current-state table (the live rows; rolled back, untimed, before each run). Partial images cannot be expressed by
  "the last change per key": the deduplication keeps, per key, its last change and, per column, the last change
  that set it (a full image sets every column, a partial one those it carries); the update takes a column from the
  changes only when one set it. Deletes are `WHEN MATCHED AND del THEN DELETE`;
- `merge_into_mor`: the same `MERGE INTO` on a copy of the current-state table set to merge-on-read
  (`write.merge.mode`, `write.update.mode`, `write.delete.mode`): Iceberg writes only the changed and new rows and
  position-delete files instead of rewriting the data files the changes touch; readers apply the deletes;
- `row_number`: the classic union-all of the state and the day's changes, `row_number()` over (key order by binlog
  position desc) picking each key's last row, deletes filtered out; partial images again need each column's last
  setter (a window `max_by` over the same partition). Written like `copy`.

The three results must be the same snapshot, row for row (live rows, data columns and `_binlog_seq`; `exceptAll`
both ways). Alongside, the parts any merge must do are timed alone (`floor_*`): the copy with a lookup of every
state row among the day's keys, a second key-only look at the state (the new keys), the fold of the changes per
key, and the copy with the state shuffled by key; and, for a design that writes no new state, the fold written as
rows. Then the scaling: copy and ours at 1M, 5M and 20M state rows with
10 % changes.

    .venv/bin/python bench/bench_merge.py [--quick] [--rows N] [--repeat R] [--scaling 1000000,20000000]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pyspark.sql import DataFrame, SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from sharp_dagster.cdc.change.binlog_schema import FILE_FACTOR, POS_FACTOR  # noqa: E402
from sharp_dagster.cdc.landing.image_tables import read_typed_images, write_typed_images  # noqa: E402
from sharp_dagster.cdc.merge.fold import merge_day  # noqa: E402
from sharp_dagster.spark.tables import TableRef  # noqa: E402

DB, TABLE, DAY = "shop", "orders", "2024-05-06"
PREVIOUS = (date.fromisoformat(DAY) - timedelta(days=1)).isoformat()
COLUMNS = [
    ("id", "bigint"),
    ("name", "string"),
    ("amount", "decimal(12,2)"),
    ("qty", "int"),
    ("status", "string"),
    ("updated_at", "timestamp"),
    ("note", "string"),
]
VALUES = [c for c, _ in COLUMNS if c != "id"]
SNAPSHOT = [c for c, _ in COLUMNS] + ["_binlog_seq"]  # what the three merges must agree on (live rows)


# ------------------------------------------------------------------------------------------------ data
def generate(rows: int, changes: int, state_dir: str, changes_dir: str) -> None:
    """The state (binlog file 1) and the day's raw changes (file 2, JSON images) as parquet, with DuckDB (fast)."""
    import duckdb

    con = duckdb.connect()
    con.execute("SET threads = 2")
    con.execute("SET enable_progress_bar = false")
    con.execute(f"""
        COPY (
            SELECT id::BIGINT AS id, 'customer-' || id AS name, ((id % 100000) / 100)::DECIMAL(12,2) AS amount,
                   (id % 1000)::INTEGER AS qty, ['NEW', 'PAID', 'SENT', 'DONE'][id % 4 + 1] AS status,
                   to_timestamp(1700000000 + id % 86400) AS updated_at, sha1(id::VARCHAR) AS note,
                   ({FILE_FACTOR}::DECIMAL(38,0) + id)::DECIMAL(38,0) AS _binlog_seq, false AS _is_deleted
            FROM range({rows}) t(id)
        ) TO '{state_dir}' (FORMAT parquet, FILE_SIZE_BYTES '40MB', OVERWRITE_OR_IGNORE true)
    """)
    unique = int(changes / 1.01)
    full = """json_object('id', {key}, 'name', 'renamed-' || i, 'amount', printf('%.2f', (i % 99999) / 100.0),
                          'qty', (i % 777)::VARCHAR, 'status', 'CHANGED', 'updated_at', '2024-05-06 07:08:09',
                          'note', sha1(i::VARCHAR))::VARCHAR"""
    # 10% inserts of new keys, 5% deletes, 2% key-changing updates (to a key new to the state), 83% updates of
    # state keys (half full images, half partial); 3 rows per binlog position; 50 events per millisecond; 1%
    # re-delivered (same event, later Kafka offset).
    con.execute(f"""
        COPY (
            WITH ev AS (
                SELECT i, h, h2, (i // 3) * 100 + 4 AS pos, i % 3 AS row_idx,
                       CASE WHEN h % 100 < 10 THEN 'c' WHEN h % 100 < 15 THEN 'd' ELSE 'u' END AS op,
                       h % 100 BETWEEN 15 AND 16 AS kc, h % 100 >= 17 AND h2 % 2 = 0 AS partial,
                       CASE WHEN h % 100 < 10 THEN {rows} + i ELSE h2 % {rows} END AS target
                FROM (SELECT i, hash(i) AS h, hash(i + 7) AS h2 FROM range({unique}) t(i))
            ),
            raw AS (
                SELECT 'src1' AS source_id, 'mysql-bin.000002' AS binlog_file, 2::BIGINT AS binlog_file_seq,
                       pos::BIGINT AS binlog_pos, row_idx::INTEGER AS row_idx,
                       (2 * {FILE_FACTOR}::DECIMAL(38,0) + pos * {POS_FACTOR} + row_idx)::DECIMAL(38,0) AS binlog_seq,
                       NULL::VARCHAR AS gtid,
                       sha1('src1|mysql-bin.000002|' || pos || '|' || row_idx) AS event_uid,
                       (1714953600000 + i // 50)::BIGINT AS event_ts_ms,
                       op, 'shop' AS source_db, 'orders' AS source_table, ['id'] AS pk_names,
                       CASE WHEN op <> 'c' THEN json_object('id', target::VARCHAR)::VARCHAR END AS before_json,
                       CASE WHEN op = 'c' THEN {full.format(key="target::VARCHAR")}
                            WHEN kc THEN {full.format(key=f"({rows} + {unique} + i)::VARCHAR")}
                            WHEN op = 'u' AND NOT partial THEN {full.format(key="target::VARCHAR")}
                            WHEN op = 'u' THEN json_object('id', target::VARCHAR, 'qty', (i % 555)::VARCHAR,
                                                           'status', 'PART')::VARCHAR
                       END AS after_json,
                       NULL::VARCHAR AS ddl_sql, 'binlog.shop' AS kafka_topic, 0::INTEGER AS kafka_partition,
                       i::BIGINT AS kafka_offset, 0::BIGINT AS ingest_ts_ms,
                       'orders' AS table_name, '{DAY}' AS dt, lpad(((i * 24) // {unique})::VARCHAR, 2, '0') AS hour
                FROM ev
            )
            SELECT * FROM raw
            UNION ALL
            SELECT * REPLACE (kafka_offset + {unique} AS kafka_offset) FROM raw WHERE hash(event_uid) % 100 = 0
        ) TO '{changes_dir}' (FORMAT parquet, FILE_SIZE_BYTES '8MB', OVERWRITE_OR_IGNORE true)
    """)
    con.close()


class Dataset:
    """One size's state partition and typed images in the warehouse (table names suffixed by the size)."""

    def __init__(self, store, root: Path, rows: int, changes: int, merge_into: bool = True):
        self.store, self.spark, self.rows = store, store.spark, rows
        tag = f"{rows}"
        self.images_db = f"{DB}{tag}"
        self.state = TableRef("ods_state", f"{TABLE}_{tag}", ("dt",))
        self.copy = TableRef("bench", f"copy_{tag}", ("dt",))
        self.rownum = TableRef("bench", f"rownum_{tag}", ("dt",))
        self.current = TableRef("bench", f"current_{tag}", ())
        self.current_mor = TableRef("bench", f"current_mor_{tag}", ())
        self.floor = TableRef("bench", f"floor_{tag}", ("dt",))
        self.day_rows = TableRef("bench", f"day_rows_{tag}", ("dt",))
        state_dir, changes_dir = str(root / f"state_{tag}"), str(root / f"changes_{tag}")
        t0 = time.perf_counter()
        generate(rows, changes, state_dir, changes_dir)
        self.generate_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        store.write_partition(self.state, {"dt": PREVIOUS}, self.spark.read.parquet(state_dir))
        self.load_state_s = time.perf_counter() - t0
        raw = self.spark.read.parquet(changes_dir)
        self.change_rows = raw.count()
        t0 = time.perf_counter()
        # The landing's typing, once (production code, typed by the state's columns).
        write_typed_images(store, self.images_db, raw, [TABLE], known={TABLE: COLUMNS})
        self.typed_images_s = time.perf_counter() - t0
        # The current-state table MERGE INTO updates: the live rows, as a user keeps them.
        name = store.name(self.current)
        self.spark.sql(f"DROP TABLE IF EXISTS {name}")
        current = self.base_state().where(~F.col("_is_deleted")).select(*SNAPSHOT)
        if (
            not merge_into
        ):  # not measured at this size: an empty table (the rownum table's schema still needs it)
            current = current.limit(0)
        current.writeTo(name).using("iceberg").tableProperty("format-version", "2").create()
        self.current_head = store.current_snapshot_id(self.current)
        mor = store.name(self.current_mor)
        self.spark.sql(f"DROP TABLE IF EXISTS {mor}")
        writer = self.spark.table(name).writeTo(mor).using("iceberg").tableProperty("format-version", "2")
        for mode in ("merge", "update", "delete"):
            writer = writer.tableProperty(f"write.{mode}.mode", "merge-on-read")
        writer.create()
        self.current_mor_head = store.current_snapshot_id(self.current_mor)
        # The other tables exist before the first timed write (creating one is not part of any method).
        for ref, frame in ((self.copy, self.base_state()), (self.floor, self.base_state())):
            store.ensure_table(ref, frame.withColumn("dt", F.lit(DAY)))
        store.ensure_table(self.rownum, row_number_frame(self).withColumn("dt", F.lit(DAY)))
        store.ensure_table(self.day_rows, day_rows_frame(self).withColumn("dt", F.lit(DAY)))
        shutil.rmtree(state_dir, ignore_errors=True)
        shutil.rmtree(changes_dir, ignore_errors=True)

    def base_state(self) -> DataFrame:
        return self.store.read_partitions(self.state, [{"dt": PREVIOUS}], needed_by="bench").drop("dt")

    def images(self) -> DataFrame:
        return read_typed_images(self.store, self.images_db, TABLE, DAY)


# ------------------------------------------------------------------------------------------------ the four runs
def run_copy(ds: Dataset) -> None:
    ds.store.write_partition(ds.copy, {"dt": DAY}, ds.base_state())


def run_ours(ds: Dataset) -> None:
    ds.store.write_partition(ds.state, {"dt": DAY}, merge_day(ds.base_state(), ds.images(), ["id"]))


def _actions_sql(images: str) -> str:
    """The day's changes as actions a user would write: one per change, plus a tombstone of the old key of a
    key-changing update. `s_<col>`: whether the change sets the column (full images all, partial ones theirs)."""
    kc = "(op = 'u' AND after.id <> before.id)"
    reset = f"(op <> 'u' OR {kc})"

    def value(c: str) -> str:
        return (
            f"CASE WHEN op = 'd' THEN NULL WHEN array_contains(after_cols, '{c}') THEN after.{c} "
            f"WHEN {kc} AND array_contains(before_cols, '{c}') THEN before.{c} END"
        )

    cols = ", ".join(
        f"{value(c)} AS v_{c}, ({reset} OR array_contains(after_cols, '{c}')) AS s_{c}" for c in VALUES
    )
    tomb = ", ".join(f"NULL AS v_{c}, true AS s_{c}" for c in VALUES)
    return f"""
        SELECT CASE WHEN op = 'd' THEN before.id ELSE after.id END AS k, binlog_seq AS seq, event_uid AS uid,
               op = 'd' AS del, {cols}
        FROM {images} WHERE op IN ('c', 'r', 'u', 'd')
        UNION ALL
        SELECT before.id AS k, binlog_seq AS seq, event_uid AS uid, true AS del, {tomb}
        FROM {images} WHERE {kc}
    """


def run_merge_into(ds: Dataset, table: TableRef | None = None) -> None:
    spark, name = ds.spark, ds.store.name(table or ds.current)
    ds.images().createOrReplaceTempView("bench_images")
    order = "named_struct('s', seq, 'u', uid)"
    folded = ", ".join(
        f"max_by(v_{c}, IF(s_{c}, {order}, NULL)) AS v_{c}, bool_or(s_{c}) AS s_{c}" for c in VALUES
    )
    dedup = f"""
        SELECT k, max(seq) AS seq, max_by(del, {order}) AS del, {folded}
        FROM ({_actions_sql("bench_images")}) GROUP BY k
    """
    sets = ", ".join(f"t.{c} = IF(s.s_{c}, s.v_{c}, t.{c})" for c in VALUES)
    spark.sql(f"""
        MERGE INTO {name} t USING ({dedup}) s ON t.id = s.k
        WHEN MATCHED AND s.seq > t._binlog_seq AND s.del THEN DELETE
        WHEN MATCHED AND s.seq > t._binlog_seq THEN UPDATE SET {sets}, t._binlog_seq = s.seq
        WHEN NOT MATCHED AND NOT s.del THEN
            INSERT ({", ".join(SNAPSHOT)}) VALUES (s.k, {", ".join(f"s.v_{c}" for c in VALUES)}, s.seq)
    """)


def run_merge_into_mor(ds: Dataset) -> None:
    run_merge_into(ds, ds.current_mor)


def reset_merge_into(ds: Dataset, table: TableRef | None = None, head: int | None = None) -> None:
    """Back to the state before the MERGE (untimed): a metadata-only rollback."""
    table, head = table or ds.current, head or ds.current_head
    if ds.store.current_snapshot_id(table) != head:
        name = f"{table.database}.{table.name}"
        ds.spark.sql(f"CALL {ds.store.catalog}.system.rollback_to_snapshot('{name}', {head})")


def reset_merge_into_mor(ds: Dataset) -> None:
    reset_merge_into(ds, ds.current_mor, ds.current_mor_head)


def row_number_frame(ds: Dataset) -> DataFrame:
    spark = ds.spark
    ds.base_state().createOrReplaceTempView("bench_state")
    ds.images().createOrReplaceTempView("bench_images")
    state_cols = ", ".join(f"{c} AS v_{c}, true AS s_{c}" for c in VALUES)
    order = "named_struct('s', seq, 'u', uid)"
    window = "OVER (PARTITION BY k)"
    last_setters = ", ".join(f"max_by(v_{c}, IF(s_{c}, {order}, NULL)) {window} AS {c}" for c in VALUES)
    return spark.sql(f"""
        SELECT k AS id, {", ".join(VALUES)}, seq AS _binlog_seq FROM (
            SELECT k, seq, del, row_number() OVER (PARTITION BY k ORDER BY seq DESC, uid DESC) AS rn, {last_setters}
            FROM (
                SELECT id AS k, _binlog_seq AS seq, '' AS uid, _is_deleted AS del, {state_cols} FROM bench_state
                UNION ALL
                {_actions_sql("bench_images")}
            )
        ) WHERE rn = 1 AND NOT del
    """)


def run_row_number(ds: Dataset) -> None:
    ds.store.write_partition(ds.rownum, {"dt": DAY}, row_number_frame(ds))


# ------------------------------------------------------------------------------------------------ floor
def floor_parts(ds: Dataset) -> dict:
    """The parts any merge of this day must do, each alone with nothing else added (a lower bound).

    - probe_write: the copy plus one hash lookup of every state row among the day's keys (computed beforehand,
      untimed), the least a merge that streams the state past the broadcast delta does to it;
    - new_keys: the state's keys looked up among the day's once more (a key-only scan): a broadcast hash join
      cannot return the build rows nothing matched, so the keys new to the state take a second look;
    - fold: the typed images read and folded per key (one max_by of the after image per key);
    - shuffle_write: the copy with the state shuffled by key, the least a merge that shuffles the state does;
    - day_rows_write: the fold written as rows (one per key the day touched) into an Iceberg table: with
      new_keys (the key-only look that finds the state rows they replace), the least a merge that does not
      rewrite the state does (merge-on-read: the day's rows and delete files; readers apply the deletes).
    """
    keys = (
        ds.images()
        .select(F.coalesce("after.id", "before.id").alias("k"))
        .distinct()
        .localCheckpoint(eager=True)
    )

    def probe_write() -> None:
        state = ds.base_state()
        joined = state.join(F.broadcast(keys), state["id"] == keys["k"], "left").drop("k")
        ds.store.write_partition(ds.floor, {"dt": DAY}, joined)

    def new_keys() -> None:
        state_keys = ds.base_state().select("id")
        matched = state_keys.join(F.broadcast(keys), state_keys["id"] == keys["k"], "left_semi")
        matched.write.format("noop").mode("overwrite").save()

    def fold() -> None:
        day_rows_frame(ds).write.format("noop").mode("overwrite").save()

    def day_rows_write() -> None:
        ds.store.write_partition(ds.day_rows, {"dt": DAY}, day_rows_frame(ds))

    def shuffle_write() -> None:
        partitions = int(ds.spark.conf.get("spark.sql.shuffle.partitions"))
        ds.store.write_partition(ds.floor, {"dt": DAY}, ds.base_state().repartition(partitions, "id"))

    return {
        "probe_write": probe_write,
        "new_keys": new_keys,
        "fold": fold,
        "shuffle_write": shuffle_write,
        "day_rows_write": day_rows_write,
    }


def day_rows_frame(ds: Dataset) -> DataFrame:
    """The day folded per key: its last after image (one max_by per key), as the floor's fold computes it."""
    grouped = ds.images().groupBy(F.coalesce("after.id", "before.id").alias("k"))
    return grouped.agg(F.max_by("after", "binlog_seq").alias("after"))


# ------------------------------------------------------------------------------------------------ equality
def compare(ds: Dataset, others: list[str]) -> dict:
    """Rows only in ours / only in each other result (exceptAll both ways: 0 and 0 is equal as multisets)."""
    store = ds.store
    state = store.read_partitions(ds.state, [{"dt": DAY}]).drop("dt")
    ours = state.where(~F.col("_is_deleted")).select(*SNAPSHOT).localCheckpoint(eager=True)
    out = {
        "result_live_rows": ours.count(),
        "result_state_rows": state.count(),
        "result_tombstones": state.where(F.col("_is_deleted")).count(),
    }
    tables = {
        "merge_into": lambda: ds.spark.table(store.name(ds.current)).select(*SNAPSHOT),
        "merge_into_mor": lambda: ds.spark.table(store.name(ds.current_mor)).select(*SNAPSHOT),
        "row_number": lambda: store.read_partitions(ds.rownum, [{"dt": DAY}]).select(*SNAPSHOT),
    }
    for name in others:
        other = tables[name]()
        out[f"only_in_ours_vs_{name}"] = ours.exceptAll(other).count()
        out[f"only_in_{name}"] = other.exceptAll(ours).count()
        out[f"equal_to_{name}"] = out[f"only_in_ours_vs_{name}"] == 0 and out[f"only_in_{name}"] == 0
    return out


# ------------------------------------------------------------------------------------------------ timing
class Clock:
    """Wall and JVM CPU seconds of an action, with the 1-minute load average at its start and end."""

    def __init__(self, spark: SparkSession):
        self._stat = None
        try:
            pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
            if Path(f"/proc/{pid}/stat").exists():
                self._stat = Path(f"/proc/{pid}/stat")
        except Exception:  # noqa: BLE001 - CPU time is an extra
            self._stat = None

    def cpu(self) -> float:
        if self._stat is None:
            return float("nan")
        fields = self._stat.read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def time(self, action) -> dict:
        load = os.getloadavg()[0]
        wall, cpu = time.perf_counter(), self.cpu()
        action()
        return {
            "s": time.perf_counter() - wall,
            "cpu_s": self.cpu() - cpu,
            "load_start": load,
            "load_end": os.getloadavg()[0],
        }


def summary(runs: list[dict]) -> dict:
    walls = [r["s"] for r in runs]
    return {
        "best_s": round(min(walls), 2),
        "median_s": round(statistics.median(walls), 2),
        "runs_s": [round(w, 2) for w in walls],
        "cpu_best_s": round(min(r["cpu_s"] for r in runs), 2),
        "load_1m": [[round(r["load_start"], 2), round(r["load_end"], 2)] for r in runs],
    }


RESETS = {"merge_into": reset_merge_into, "merge_into_mor": reset_merge_into_mor}


def measure(ds: Dataset, clock: Clock, repeat: int, methods: list[str], floors: bool, warm_up: bool) -> dict:
    actions = {
        "copy": run_copy,
        "ours": run_ours,
        "merge_into": run_merge_into,
        "merge_into_mor": run_merge_into_mor,
        "row_number": run_row_number,
    }
    parts = floor_parts(ds) if floors else {}
    if warm_up:  # JIT, caches (the first size measured only: later ones run warm)
        for name in methods:
            RESETS.get(name, lambda _: None)(ds)
            actions[name](ds)
        for part in parts.values():
            part()
    runs: dict[str, list[dict]] = {name: [] for name in [*methods, *(f"floor_{p}" for p in parts)]}
    for _ in range(repeat):  # alternated, so that a burst of load elsewhere hits all alike
        for name in methods:
            RESETS.get(name, lambda _: None)(ds)
            runs[name].append(clock.time(lambda a=actions[name]: a(ds)))
        for name, part in parts.items():
            runs[f"floor_{name}"].append(clock.time(part))
    out = {
        "state_rows": ds.rows,
        "change_rows": ds.change_rows,
        "generate_s": round(ds.generate_s, 1),
        "load_state_s": round(ds.load_state_s, 1),
        "typed_images_s": round(ds.typed_images_s, 1),
        "repeat": repeat,
    }
    out.update({name: summary(r) for name, r in runs.items()})
    copy = out["copy"]["best_s"]
    for name in methods:
        if name != "copy":
            out[f"ratio_{name}_to_copy"] = round(out[name]["best_s"] / copy, 3)
            out[f"ratio_{name}_to_copy_median"] = round(out[name]["median_s"] / out["copy"]["median_s"], 3)
    if parts:
        best = {p: out[f"floor_{p}"]["best_s"] for p in parts}
        broadcast_floor = best["probe_write"] + best["new_keys"] + best["fold"]
        shuffle_floor = best["shuffle_write"] + best["fold"]
        out["floor_broadcast_ratio_to_copy"] = round(broadcast_floor / copy, 3)
        out["floor_shuffle_ratio_to_copy"] = round(shuffle_floor / copy, 3)
        out["floor_ratio_to_copy"] = round(min(broadcast_floor, shuffle_floor) / copy, 3)
        # Not a bound on merges that write a new state: that of a design that writes only the day's rows.
        out["floor_day_rows_ratio_to_copy"] = round((best["day_rows_write"] + best["new_keys"]) / copy, 3)
    out.update(compare(ds, [m for m in methods if m in ("merge_into", "merge_into_mor", "row_number")]))
    return out


def run(
    rows: int, repeat: int, scaling: list[int], scaling_repeat: int, alternatives_up_to: int, budget_s: float
) -> dict:
    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="bench_merge_"))
    os.environ["SHARP_DATA_DIR"] = str(work / "data")
    os.environ.setdefault("SHARP_SPARK_MASTER", "local[2]")
    from sharp_dagster.spark.iceberg import warehouse_tables
    from sharp_dagster.spark.session import build_spark_session

    settings = SimpleNamespace(warehouse_dir=work / "warehouse", log_db_url=f"sqlite:///{work / 'log.db'}")
    spark = build_spark_session(app_name="bench_merge", **{"spark.driver.memory": "8g"})
    try:
        store = warehouse_tables(spark, settings)
        clock = Clock(spark)
        all_methods = ["copy", "ours", "merge_into", "merge_into_mor", "row_number"]
        result: dict = {
            "spark_master": spark.sparkContext.master,
            "cores": spark.sparkContext.defaultParallelism,
        }
        result["load_avg_1m_at_start"] = round(os.getloadavg()[0], 2)
        scale, skipped, last = [], [], None
        # Smallest first: its warm-up warms the JVM for all; the main size also times the floor parts.
        for n in sorted(set(scaling) | {rows}):
            methods = all_methods if n <= alternatives_up_to else ["copy", "ours"]
            reps = repeat if n == rows else scaling_repeat
            if last is not None and n != rows:  # the main size always runs
                n0, methods0, reps0, seconds0 = last
                estimate = seconds0 * n / n0 * len(methods) / len(methods0) * (reps + 1) / (reps0 + 1)
                elapsed = time.perf_counter() - started
                if elapsed + estimate > budget_s:
                    skipped.append(
                        {"state_rows": n, "estimated_s": round(estimate), "elapsed_s": round(elapsed)}
                    )
                    continue
            t0 = time.perf_counter()
            ds = Dataset(store, work, n, n // 10, merge_into="merge_into" in methods)
            point = measure(ds, clock, reps, methods, floors=n == rows, warm_up=last is None)
            point["point_wall_s"] = round(time.perf_counter() - t0, 1)
            last = (n, methods, reps, point["point_wall_s"])
            if n == rows:
                result.update(point)
            scale.append(
                {
                    k: point[k]
                    for k in (
                        "state_rows",
                        "change_rows",
                        "repeat",
                        "ratio_ours_to_copy",
                        "ratio_merge_into_to_copy",
                        "ratio_merge_into_mor_to_copy",
                        "ratio_row_number_to_copy",
                        "equal_to_merge_into",
                        "equal_to_merge_into_mor",
                        "equal_to_row_number",
                    )
                    if k in point
                }
                | {f"{m}_s": point[m]["best_s"] for m in all_methods if m in point}
                | {f"{m}_runs_s": point[m]["runs_s"] for m in all_methods if m in point}
                | {f"{m}_load_1m": point[m]["load_1m"] for m in all_methods if m in point}
            )
            result["scaling"] = scale
            _progress(result)
        if skipped:
            result["scaling_skipped_for_time"] = skipped
        if len(scale) > 1:
            first, final = scale[0], scale[-1]
            growth = {
                "from_rows": first["state_rows"],
                "to_rows": final["state_rows"],
                "state_rows_factor": round(final["state_rows"] / first["state_rows"], 1),
                "copy_time_factor": round(final["copy_s"] / first["copy_s"], 2),
                "ours_time_factor": round(final["ours_s"] / first["ours_s"], 2),
            }
            growth["ours_grows_no_faster_than_copy"] = (
                growth["ours_time_factor"] <= growth["copy_time_factor"]
            )
            result["scaling_growth"] = growth
        result["load_avg_1m_at_end"] = round(os.getloadavg()[0], 2)
        result["total_wall_s"] = round(time.perf_counter() - started, 1)
        return result
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


def _progress(result: dict) -> None:
    """Partial results on stderr and in a file as they come (a long run that dies still says what it measured)."""
    text = json.dumps(result)
    print(text, file=sys.stderr, flush=True)
    Path(tempfile.gettempdir(), "bench_merge_progress.json").write_text(text)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="200,000 state rows; scaling 100,000 and 400,000"
    )
    parser.add_argument("--rows", type=int, help="state rows of the main comparison (default 5,000,000)")
    parser.add_argument("--repeat", type=int, help="timed runs of each at the main size (default 2, quick 1)")
    parser.add_argument("--scaling", help="other state sizes for the scaling (default 1000000,20000000)")
    parser.add_argument("--scaling-repeat", type=int, help="timed runs per scaling size (default 1)")
    parser.add_argument(
        "--budget-s", type=float, default=3900, help="skip a scaling size its estimate would take past this"
    )
    parser.add_argument(
        "--alternatives-up-to", type=int, help="sizes up to which the scaling also times the alternatives"
    )
    args = parser.parse_args(argv)
    rows = args.rows or (200_000 if args.quick else 5_000_000)
    repeat = args.repeat or (1 if args.quick else 2)
    scaling_default = "100000,400000" if args.quick else "1000000,20000000"
    scaling = [int(n) for n in (args.scaling or scaling_default).split(",") if n]
    scaling_repeat = args.scaling_repeat or 1
    alternatives_up_to = args.alternatives_up_to or (10**9 if args.quick else 5_000_000)
    os.environ.setdefault("SHARP_SPARK_LOG_LEVEL", "ERROR")
    result = run(rows, repeat, scaling, scaling_repeat, alternatives_up_to, args.budget_s)
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    r = main()
    equal = ("equal_to_merge_into", "equal_to_merge_into_mor", "equal_to_row_number")
    sys.exit(0 if all(r.get(k) for k in equal) else 1)
