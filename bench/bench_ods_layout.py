"""Benchmark of the ODS layout of issue 33 (a current-state table, merge-on-read, a tag per day) against the `dt`
layout's plain copy and Iceberg's own merge-on-read `MERGE INTO`, side by side in one run.

Data: `bench_merge.py`'s generator and landing (a state of N rows, C changes of the day as typed images: inserts,
deletes, key-changing and partial updates, re-deliveries; `--full-images`: no partial update, as with MySQL's
default `binlog_row_image=FULL`). The current-state table is format v3 with the ODS
table properties (`cdc/ods/versions.py`) except `write.spark.accept-any-schema`, with which Spark 4.1 + Iceberg
1.11 cannot resolve a `MERGE INTO`'s target columns; its previous day is tagged.

Timed (alternately, R times, best and median kept; `bench_merge.Clock`):
- `copy`: the state partition read and written as a new partition (what the `dt` layout writes every day);
- `merge_into_mor`: Iceberg's `MERGE INTO` of the day's changes into the current-state table, merge-on-read
  (rolled back, untimed, before each run);
- `ours`: the merge of the new layout (`cdc/ods/merge.py` of issue 33) when this checkout has it, else left out
  and said so; `floor_day_rows`: the least such a merge does (the fold written as rows + a key-only look at the
  state: `bench_merge`'s floor parts), a reference, not a merge.
Then: the scaling (the same C changes at other state sizes: copy and `MERGE INTO`); a DWD-like read (a filtered
aggregate over every column a DWD build reads) of the day as a `dt` partition vs as a tag with the day's deletion
vectors vs the same tag after compaction (`cdc/ods/upkeep.py` moves the newest tag to the compacted snapshot);
the storage after D published days (each day C/N of the rows replaced: deletes + new rows, tagged), before
and after the upkeep with a retention, as a multiple of one copy of the state; and (`--parts latency`, issue 44,
`ods_latency.py`) the latency from the day's last done marker to its tag, the whole day merged then vs the day
pre-merged as its hours landed; and (`--parts storage_premerge`, `ods_storage_premerge.py`) the storage and the
newest tag's read after D days published the plain way and pre-merged hour by hour, side by side.

    .venv/bin/python bench/bench_ods_layout.py [--quick] [--rows N] [--changes C] [--scaling 1000000,20000000]
                                               [--days 30] [--retention 7] [--repeat R] [--full-images]
                                               [--parts day,reads,storage,scaling,latency,storage_premerge]
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))
sys.path.insert(0, str(BENCH))

import bench_merge as bm  # noqa: E402
import ods_latency  # noqa: E402
import ods_storage_premerge  # noqa: E402

from sharp_dagster.cdc.ods.upkeep import compact, refs, storage, upkeep_table  # noqa: E402
from sharp_dagster.cdc.ods.versions import ODS_TABLE_PROPERTIES, day_tag, is_day_tag  # noqa: E402
from sharp_dagster.settings import ods_compact_options  # noqa: E402
from sharp_dagster.spark.tables import TableRef  # noqa: E402

# accept-any-schema makes Spark 4.1 fail to resolve MERGE INTO's target columns (UNRESOLVED_COLUMN on `t`.`id`).
PROPS = {k: v for k, v in ODS_TABLE_PROPERTIES.items() if k != "write.spark.accept-any-schema"}
DWD_READ = "SELECT status, count(*) AS n, sum(amount) AS amount, sum(qty) AS qty, max(updated_at) AS last, "
DWD_READ += "count(DISTINCT name) AS names FROM {source} WHERE note IS NOT NULL GROUP BY status"


def generate_spark(
    spark, rows: int, changes: int, state_dir: str, changes_dir: str, full_images: bool = False
) -> None:
    """`bench_merge.generate` in Spark SQL, for a checkout without DuckDB (the `bench` extra; CI has `test` only):
    the same state and the same kinds and shares of changes, as raw Canal-style JSON binlog rows. With
    `full_images` every update carries the whole row (MySQL's default `binlog_row_image=FULL`); else half the plain
    updates carry only the key and two columns (`MINIMAL`)."""
    partial = "false" if full_images else "h % 100 >= 17 AND h2 % 2 = 0"
    from pyspark.sql import functions as F

    ff, pf = bm.FILE_FACTOR, bm.POS_FACTOR
    spark.sql(f"""
        SELECT id, concat('customer-', id) AS name, CAST((id % 100000) / 100 AS DECIMAL(12,2)) AS amount,
               CAST(id % 1000 AS INT) AS qty, element_at(array('NEW', 'PAID', 'SENT', 'DONE'), CAST(id % 4 + 1 AS INT)) AS status,
               timestamp_seconds(1700000000 + id % 86400) AS updated_at, sha1(CAST(id AS STRING)) AS note,
               CAST(CAST({ff} AS DECIMAL(38,0)) + id AS DECIMAL(38,0)) AS _binlog_seq, false AS _is_deleted
        FROM range(0, {rows})
    """).write.mode("overwrite").parquet(state_dir)
    unique = int(changes / 1.01)

    def full(key: str) -> str:
        return (
            f"to_json(named_struct('id', {key}, 'name', concat('renamed-', i), 'amount', "
            f"format_string('%.2f', CAST((i % 99999) / 100.0 AS DOUBLE)), 'qty', CAST(i % 777 AS STRING), 'status', 'CHANGED', "
            f"'updated_at', '2024-05-06 07:08:09', 'note', sha1(CAST(i AS STRING))))"
        )

    raw = spark.sql(f"""
        WITH ev AS (
            SELECT i, h, h2, (i div 3) * 100 + 4 AS pos, CAST(i % 3 AS INT) AS row_idx,
                   CASE WHEN h % 100 < 10 THEN 'c' WHEN h % 100 < 15 THEN 'd' ELSE 'u' END AS op,
                   h % 100 BETWEEN 15 AND 16 AS kc, {partial} AS partial,
                   CASE WHEN h % 100 < 10 THEN {rows} + i ELSE h2 % {rows} END AS target
            FROM (SELECT id AS i, pmod(xxhash64(id), 2147483647) AS h, pmod(xxhash64(id + 7), 2147483647) AS h2
                  FROM range(0, {unique}))
        )
        SELECT 'src1' AS source_id, 'mysql-bin.000002' AS binlog_file, CAST(2 AS BIGINT) AS binlog_file_seq,
               CAST(pos AS BIGINT) AS binlog_pos, row_idx,
               CAST(2 * CAST({ff} AS DECIMAL(38,0)) + pos * {pf} + row_idx AS DECIMAL(38,0)) AS binlog_seq,
               CAST(NULL AS STRING) AS gtid, sha1(concat('src1|mysql-bin.000002|', pos, '|', row_idx)) AS event_uid,
               CAST(1714953600000 + i div 50 AS BIGINT) AS event_ts_ms, op, 'shop' AS source_db,
               'orders' AS source_table, array('id') AS pk_names,
               CASE WHEN op <> 'c' THEN to_json(named_struct('id', CAST(target AS STRING))) END AS before_json,
               CASE WHEN op = 'c' THEN {full("CAST(target AS STRING)")}
                    WHEN kc THEN {full(f"CAST({rows} + {unique} + i AS STRING)")}
                    WHEN op = 'u' AND NOT partial THEN {full("CAST(target AS STRING)")}
                    WHEN op = 'u' THEN to_json(named_struct('id', CAST(target AS STRING),
                                                            'qty', CAST(i % 555 AS STRING), 'status', 'PART'))
               END AS after_json,
               CAST(NULL AS STRING) AS ddl_sql, 'binlog.shop' AS kafka_topic, CAST(0 AS INT) AS kafka_partition,
               CAST(i AS BIGINT) AS kafka_offset, CAST(0 AS BIGINT) AS ingest_ts_ms, 'orders' AS table_name,
               '{bm.DAY}' AS dt, lpad(CAST((i * 24) div {unique} AS STRING), 2, '0') AS hour
        FROM ev
    """)
    again = raw.where("pmod(xxhash64(event_uid), 100) = 0").withColumn(
        "kafka_offset", F.col("kafka_offset") + unique
    )
    raw.unionByName(again).write.mode("overwrite").parquet(changes_dir)


def use_spark_generator(spark, full_images: bool = False) -> str:
    """DuckDB's generator when this checkout has the `bench` extra, else the same data from Spark SQL (always for
    `full_images`, which only the Spark generator makes)."""
    if not full_images:
        try:
            import duckdb  # noqa: F401

            return "duckdb"
        except ImportError:
            pass
    bm.generate = lambda rows, changes, state_dir, changes_dir: generate_spark(
        spark, rows, changes, state_dir, changes_dir, full_images
    )
    return "spark, full images" if full_images else "spark"


def ours_merge():
    """The new layout's merge function when this checkout has it (`cdc/ods/merge.py`, issue 33), else None."""
    try:
        return getattr(importlib.import_module("sharp_dagster.cdc.ods.merge"), "merge_into", None)
    except ImportError:
        return None


class Ours:
    """The new layout's own merge (`cdc/ods/merge.py`) on tables of its own (`ods.layout_<rows>`,
    `ods_state.layout_<rows>`): the state published as the previous day's tag (untimed), then each timed run
    stages the day on a branch and publishes it (`stage_days` + `publish`: cut, merge, fence, fast-forward, tag),
    rolled back to the previous day (untimed) before the next."""

    def __init__(self, ds, name: str = "layout"):
        from sharp_dagster.cdc.ods import merge as ods_merge
        from sharp_dagster.cdc.ods import store as ods_store

        self.ds, self.merge, self.ods_store = ds, ods_merge, ods_store
        self.table = f"{name}_{ds.rows}"
        for ref in ods_store.both(self.table):
            ds.store.drop_table(ref)
        ods_merge.write_state(ds.store, self.table, bm.PREVIOUS, ds.base_state(), ["id"])
        self.runs = 0

    def reset(self) -> None:
        if bm.DAY in self.ods_store.published_days(self.ds.store, self.table):
            self.ods_store.rollback_to_day(self.ds.store, self.table, bm.PREVIOUS)

    def run(self) -> None:
        self.runs += 1
        branch, store = f"stage_bench_{self.runs}", self.ds.store
        changes = self.ds.images()
        staged, main = self.merge.stage_days(
            store, self.table, branch, [bm.DAY], lambda _: (changes, None), ["id"]
        )
        self.merge.publish(store, self.table, branch, staged, main)

    def check(self) -> dict:
        """The published day against `merge_day(state, changes)` (the pure fold), row for row: live rows whole
        (`exceptAll` both ways) and tombstones as key + position."""
        from pyspark.sql import functions as F

        from sharp_dagster.cdc.merge.fold import merge_day

        if bm.DAY not in self.ods_store.published_days(self.ds.store, self.table):
            self.run()
        expected = merge_day(self.ds.base_state(), self.ds.images(), ["id"]).localCheckpoint(eager=True)
        stored = self.ods_store.state_at(self.ds.store, self.table, day_tag(bm.DAY)).localCheckpoint(
            eager=True
        )
        out = {}
        for kind, rows, cols in (
            ("live", "NOT _is_deleted", bm.SNAPSHOT),
            ("tombstones", "_is_deleted", ["id", "_binlog_seq"]),
        ):
            want, got = (df.where(rows).select(*[F.col(c) for c in cols]) for df in (expected, stored))
            out[f"{kind}_rows"] = got.count()
            out[f"{kind}_only_in_ours"] = got.exceptAll(want).count()
            out[f"{kind}_only_in_merge_day"] = want.exceptAll(got).count()
        out["equal_to_merge_day"] = all(v == 0 for k, v in out.items() if "_only_in_" in k)
        return out


def current_v3(ds, suffix: str = "v3") -> TableRef:
    """A format v3 merge-on-read copy of the live state, its previous day tagged."""
    store, spark = ds.store, ds.spark
    ref = TableRef("bench", f"current_{suffix}_{ds.rows}", ())
    store.drop_table(ref)
    writer = spark.table(store.name(ds.current)).writeTo(store.name(ref)).using("iceberg")
    for key, value in PROPS.items():
        writer = writer.tableProperty(key, value)
    writer.create()
    table = store.java_table(ref)
    table.manageSnapshots().createTag(day_tag(bm.PREVIOUS), table.currentSnapshot().snapshotId()).commit()
    return ref


def time_day(
    ds,
    v3: TableRef,
    clock,
    repeat: int,
    floors: bool,
    check: bool = True,
    merge_into: bool = True,
    warmup: bool = True,
) -> dict:
    """copy, `MERGE INTO`, ours and the floor of one day, `repeat` alternated rounds each (best kept), after one
    untimed run of each (JIT, caches) unless not `warmup` (a smoke run: `--quick`)."""
    head = ds.store.current_snapshot_id(v3)
    actions = {"copy": lambda: bm.run_copy(ds)}
    if merge_into:
        actions["merge_into_mor"] = lambda: bm.run_merge_into(ds, v3)
    resets = {"merge_into_mor": lambda: bm.reset_merge_into(ds, v3, head)}
    ours = Ours(ds) if ours_merge() is not None else None
    if ours is not None:
        actions["ours"] = ours.run
        resets["ours"] = ours.reset
    if floors:
        parts = bm.floor_parts(ds)
        actions["floor_day_rows"] = lambda: (parts["day_rows_write"](), parts["new_keys"]())
    if warmup:
        for name, action in actions.items():
            resets.get(name, lambda: None)()
            action()
    runs: dict[str, list] = {name: [] for name in actions}
    for _ in range(repeat):
        for name, action in actions.items():
            resets.get(name, lambda: None)()
            runs[name].append(clock.time(action))
    out = {name: bm.summary(r) for name, r in runs.items()}
    copy = out["copy"]["best_s"]
    for name in actions:
        if name != "copy":
            out[f"ratio_{name}_to_copy"] = round(out[name]["best_s"] / copy, 3)
    if ours is None:
        out["ours"] = "not run: this checkout has no new-layout merge (cdc/ods_merge.merge_into)"
    elif check:
        out["ours_check"] = ours.check()
    return out


def alternated_reads(spark, sources: dict[str, str], clock, repeat: int) -> dict[str, list]:
    """The DWD-like read of each source once as a warm-up, then `repeat` timed rounds alternating the sources."""
    timed: dict[str, list] = {name: [] for name in sources}
    for source in sources.values():
        spark.sql(DWD_READ.format(source=source)).collect()
    for _ in range(repeat):
        for name, source in sources.items():
            timed[name].append(clock.time(lambda s=source: spark.sql(DWD_READ.format(source=s)).collect()))
    return timed


def reads(ds, v3: TableRef, clock, repeat: int) -> dict:
    """The DWD-like read of the day: a `dt` partition of the copy vs the tag (deletion vectors) vs after the upkeep's
    compaction (`settings.ods_compact_options()`)."""
    store, spark = ds.store, ds.spark
    bm.run_copy(ds)  # the `dt` partition read below (`time_day` writes it too, when it runs)
    bm.run_merge_into(ds, v3)  # the day merged, kept this time, and tagged
    table = store.java_table(v3)
    table.manageSnapshots().createTag(day_tag(bm.DAY), table.currentSnapshot().snapshotId()).commit()
    sources = {
        "dt_partition": f"(SELECT * FROM {store.name(ds.copy)} WHERE dt = '{bm.DAY}')",
        "tag_with_deletes": f"{store.name(v3)} VERSION AS OF '{bm.DAY}'",
    }
    out = {"delete_files_at_tag": spark.sql(f"SELECT count(*) FROM {store.name(v3)}.delete_files").first()[0]}

    def read(source: str) -> None:
        spark.sql(DWD_READ.format(source=source)).collect()

    timed = alternated_reads(spark, sources, clock, repeat)
    # The compaction the upkeep runs (the project's options): what readers of the tag get after it.
    out["compaction_options"] = ods_compact_options()
    out["compaction"] = compact(store, v3, out["compaction_options"])
    from sharp_dagster.cdc.ods.upkeep import _follow_compaction

    out["tags_moved_to_compaction"] = _follow_compaction(store, v3)
    source = f"{store.name(v3)} VERSION AS OF '{bm.DAY}'"
    read(source)
    timed["tag_after_compaction"] = [clock.time(lambda: read(source)) for _ in range(repeat)]
    # Then every file with a delete rewritten (what the 30 % delete-ratio rule does to a file in the end).
    out["full_compaction"] = compact(store, v3, {"delete-file-threshold": "1"})
    out["tags_moved_to_full_compaction"] = _follow_compaction(store, v3)
    read(source)
    timed["tag_after_full_compaction"] = [clock.time(lambda: read(source)) for _ in range(repeat)]
    out.update({name: bm.summary(r) for name, r in timed.items()})
    base = out["dt_partition"]["best_s"]
    for name in ("tag_with_deletes", "tag_after_compaction", "tag_after_full_compaction"):
        out[f"ratio_{name}_to_dt_partition"] = round(out[name]["best_s"] / base, 3)
    return out


def read_vs_fresh_copy(ds, v3: TableRef, day: str, clock, repeat: int) -> dict:
    """The DWD-like read of the newest day's tag after the days (their small files and deletion vectors, as the
    daily upkeep left them) vs the same rows as a fresh copy: what the compaction policy costs the readers."""
    store = ds.store
    fresh = TableRef("bench", f"fresh_{ds.rows}", ())
    store.drop_table(fresh)
    writer = ds.spark.table(store.name(v3)).writeTo(store.name(fresh)).using("iceberg")
    for key, value in PROPS.items():
        writer = writer.tableProperty(key, value)
    writer.create()
    sources = {"fresh_copy": store.name(fresh), "tag_after_days": f"{store.name(v3)} VERSION AS OF '{day}'"}
    out = {name: bm.summary(r) for name, r in alternated_reads(ds.spark, sources, clock, repeat).items()}
    out["fresh_copy_files"] = storage(store, fresh)["data_files"]
    out["ratio_tag_after_days_to_fresh_copy"] = round(
        out["tag_after_days"]["best_s"] / out["fresh_copy"]["best_s"], 3
    )
    store.drop_table(fresh)
    return out


# What each day's compaction did (`rewrite_data_files`' own counts).
REWRITE_COUNTS = ["rewritten_data_files_count", "added_data_files_count", "rewritten_bytes_count"]


def storage_after_days(
    ds,
    days: int,
    retentions: list[int],
    share: int | None = None,
    daily: int | None = None,
    clock=None,
    repeat: int = 2,
) -> dict:
    """`days` published days on a v3 current-state table, each replacing 1/`share` of the rows (deletes of the old
    rows + the new rows, as a day's merge writes them; default `rows/changes`) and tagged; then the upkeep
    (compaction, tag and snapshot expiry) with each retention, longest first (each upkeep runs on what the
    previous one left). With `daily`, the upkeep also runs after every day with that retention and the project's
    compaction options (`settings.ods_compact_options()`: the defaults, `SHARP_ODS_COMPACT_OPTIONS` over them), as its
    schedule runs it. Beside each measure, the least any layout keeps (`lower_bound_copies`): every row version
    a kept tag can read, 1 + (kept tags - 1) x the share replaced per day, as copies of the state. With `daily`
    and a `clock`, the DWD-like read of the newest tag after the days vs a fresh copy (`read_vs_fresh_copy`)."""
    store, spark = ds.store, ds.spark
    v3 = current_v3(ds, "days")
    name = store.name(v3)
    one_copy = storage(store, v3)["bytes"]
    share = share or max(1, round(ds.rows / max(1, ds.change_rows)))  # every share-th key changes each day
    t0, copies, files, rewrites, compactions = time.perf_counter(), [], [], [], 0
    options = ods_compact_options()
    for d in range(1, days + 1):
        pick = f"pmod(xxhash64(id, {d}), {share}) = 0"
        changed = (
            spark.table(name)
            .where(pick)
            .selectExpr(
                "id",
                "name",
                "amount",
                f"CAST(qty + {d} AS int) AS qty",
                "'DAY' AS status",
                "updated_at",
                "note",
                f"CAST(_binlog_seq + {d} AS decimal(38,0)) AS _binlog_seq",
            )
            .localCheckpoint(eager=True)
        )
        spark.sql(f"DELETE FROM {name} WHERE {pick}")
        changed.writeTo(name).append()
        table = store.java_table(v3)
        tag = (bm.date.fromisoformat(bm.DAY) + bm.timedelta(days=d - 1)).isoformat()
        table.manageSnapshots().createTag(day_tag(tag), table.currentSnapshot().snapshotId()).commit()
        if daily:
            kept = upkeep_table(store, v3, daily, options, now=bm_now_plus_grace())
            copies.append(round(kept.storage_after["bytes"] / one_copy, 2))
            files.append([kept.storage_after["data_files"], kept.storage_after["delete_files"]])
            c = kept.compaction
            rewrites.append([c.get(f"data_{k}", 0) for k in REWRITE_COUNTS])
            compactions += bool(kept.compaction.get("data_rewritten_data_files_count"))
    store.refresh(v3)
    out = {"days": days, "rows_changed_per_day_share": round(1 / share, 4), "one_copy_bytes": one_copy}
    if daily:
        out["daily_upkeep"] = {
            "retention": daily,
            "compact_options": options,
            "copies_after_each_day": copies,
            "data_and_delete_files_after_each_day": files,
            "compaction_after_each_day": {"counts": REWRITE_COUNTS, "days": rewrites},
            "compactions": compactions,
        }
    out["write_days_s"] = round(time.perf_counter() - t0, 1)
    if daily and clock is not None:
        out["read_after_days"] = read_vs_fresh_copy(ds, v3, day_tag(tag), clock, repeat)
    before = storage(store, v3)
    # Without the daily upkeep: the previous day's tag and one per published day.
    tags = sum(1 for n, kind in refs(store, v3).items() if kind == "TAG" and is_day_tag(n))
    out["all_tags_kept" if not daily else "after_days_with_daily_upkeep"] = before | {
        "copies": round(before["bytes"] / one_copy, 2),
        "tags": tags,
        "lower_bound_copies": round(1 + (tags - 1) / share, 2),
    }
    for retention in sorted(retentions, reverse=True):
        t0 = time.perf_counter()
        kept = upkeep_table(store, v3, retention, {"delete-file-threshold": "1"}, now=bm_now_plus_grace())
        after = kept.storage_after
        out[f"after_upkeep_retention_{retention}"] = after | {
            "copies": round(after["bytes"] / one_copy, 2),
            "dropped_tags": len(kept.dropped_tags),
            "kept_tags": kept.kept_tags,
            "lower_bound_copies": round(1 + (kept.kept_tags - 1) / share, 2),
            "upkeep_s": round(time.perf_counter() - t0, 1),
            "compaction": kept.compaction,
            "expiry": kept.expiry,
        }
    out["dt_layout_copies_after_same_days"] = days + 1  # one full partition per day (ods), plus ods_state's
    return out


def bm_now_plus_grace():
    """A `now` past the snapshots' grace period, so this run's snapshots count as old enough to expire."""
    from datetime import UTC, datetime

    from sharp_dagster.cdc.ods.upkeep import SNAPSHOT_GRACE

    return datetime.now(UTC) + SNAPSHOT_GRACE + bm.timedelta(minutes=1)


def _scaling_point(ds, point: dict) -> dict:
    timed = [m for m in ("copy", "merge_into_mor", "ours") if isinstance(point.get(m), dict)]
    out = {"state_rows": ds.rows, "change_rows": ds.change_rows}
    out.update({f"{m}_s": point[m]["best_s"] for m in timed})
    out.update({f"{m}_cpu_s": point[m]["cpu_best_s"] for m in timed})
    out["load_1m"] = {m: point[m]["load_1m"] for m in timed}
    return out


def scaling(
    store,
    work: Path,
    sizes: list[int],
    changes: int,
    clock,
    repeat: int,
    merge_into: bool = True,
    warmup: bool = True,
) -> list[dict]:
    """copy, MERGE INTO (merge-on-read; not with `merge_into` false) and ours at other state sizes, with the same
    changes, `repeat` alternated rounds each (best kept, as in the day's comparison; `warmup` as `time_day`)."""
    points = []
    for n in sizes:
        ds = bm.Dataset(store, work, n, changes, merge_into=merge_into)
        v3 = current_v3(ds)
        point = time_day(
            ds, v3, clock, repeat=repeat, floors=False, check=False, merge_into=merge_into, warmup=warmup
        )
        points.append(_scaling_point(ds, point))
        _progress({"scaling_point": points[-1]})
    return points


def run(args) -> dict:
    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="bench_ods_layout_"))
    os.environ["SHARP_DATA_DIR"] = str(work / "data")
    os.environ.setdefault("SHARP_SPARK_MASTER", "local[2]")
    from sharp_dagster.spark.iceberg import warehouse_tables
    from sharp_dagster.spark.session import build_spark_session

    (work / "warehouse").mkdir(parents=True)
    settings = SimpleNamespace(warehouse_dir=work / "warehouse", log_db_url=f"sqlite:///{work / 'log.db'}")
    spark = build_spark_session(app_name="bench_ods_layout", **{"spark.driver.memory": args.driver_memory})
    try:
        store = warehouse_tables(spark, settings)
        return measure(store, work, args, started)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


def measure(store, work: Path, args, started: float) -> dict:
    """Every part of the benchmark (`args.parts`) in `store`'s session (the test runs it in the test session)."""
    clock = bm.Clock(store.spark)
    result: dict = {
        "machine": {"cpus": os.cpu_count(), "spark_master": store.spark.sparkContext.master},
        "load_avg_at_start": [round(x, 2) for x in os.getloadavg()],
        "rows": args.rows,
        "changes": args.changes,
        "parts": args.parts,
        "ours_available": ours_merge() is not None,
        "data_generator": use_spark_generator(store.spark, args.full_images),
    }
    needs_main = MAIN_SIZE_PARTS & set(args.parts) or args.rows in args.scaling
    mi = not args.no_merge_into
    warmup = not args.quick  # a smoke run times each action once, cold
    ds = bm.Dataset(store, work, args.rows, args.changes, merge_into=mi) if needs_main else None
    v3 = current_v3(ds) if needs_main else None
    if needs_main and ("day" in args.parts or "scaling" in args.parts):
        floors = "day" in args.parts
        result["day"] = time_day(ds, v3, clock, args.repeat, floors, merge_into=mi, warmup=warmup)
        _progress(result)
    if "reads" in args.parts:
        result["reads"] = reads(ds, v3, clock, args.repeat)
        _progress(result)
    if "latency" in args.parts:
        every = 8 if args.quick else 1  # a smoke run pre-merges 8 hours a call
        result["latency"] = ods_latency.latency(ds, clock, args.repeat, every=every)
        _progress(result)
    if "storage" in args.parts:
        result["storage"] = storage_after_days(
            ds, args.days, args.retention, args.storage_share, args.daily_upkeep, clock, args.repeat
        )
        _progress(result)
    if "storage_premerge" in args.parts:
        share = args.storage_share or max(1, round(args.rows / args.changes))
        result["storage_premerge"] = ods_storage_premerge.storage_paths(
            ds,
            clock,
            SimpleNamespace(
                PROPS=PROPS, alternated_reads=alternated_reads, bm_now_plus_grace=bm_now_plus_grace
            ),
            args.days,
            share,
            args.daily_upkeep or 30,
            args.repeat,
            every=8 if args.quick else 1,
        )
        _progress(result)
    if "scaling" in args.parts:
        others = [n for n in args.scaling if n != args.rows]
        points = scaling(store, work, others, args.changes, clock, args.repeat, mi, warmup) if others else []
        if "day" in result:
            points.append(_scaling_point(ds, result["day"]))
        result["scaling"] = sorted(points, key=lambda p: p["state_rows"])
        result["scaling_growth"] = _growth(result["scaling"])
    result["load_avg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    result["total_wall_s"] = round(time.perf_counter() - started, 1)
    return result


def _growth(points: list[dict]) -> dict:
    """Wall and CPU time factors from the smallest state to the largest (the same changes)."""
    first, last = points[0], points[-1]
    if last["state_rows"] <= first["state_rows"]:
        return {}
    out = {"rows_factor": round(last["state_rows"] / first["state_rows"], 1)}
    for m in ("copy", "merge_into_mor", "ours"):
        if f"{m}_s" in first and f"{m}_s" in last:
            out[f"{m}_time_factor"] = round(last[f"{m}_s"] / first[f"{m}_s"], 2)
            out[f"{m}_cpu_factor"] = round(last[f"{m}_cpu_s"] / first[f"{m}_cpu_s"], 2)
    return out


def _progress(result: dict) -> None:
    print(json.dumps(result, default=str), file=sys.stderr, flush=True)


PARTS = ("day", "reads", "storage", "scaling", "latency", "storage_premerge")
MAIN_SIZE_PARTS = {"day", "reads", "storage", "latency", "storage_premerge"}  # measured at --rows

# (flag, type, help): every size has a full and a --quick default (parse_args).
OPTIONS = [
    ("--rows", int, "state rows of the day's comparison (default 5,000,000)"),
    ("--changes", int, "changes of the day (default 500,000)"),
    ("--scaling", str, "state sizes for the scaling (default 1000000,20000000)"),
    ("--days", int, "published days for the storage figure (default 30)"),
    ("--repeat", int, "timed runs of each (default 2, quick 1)"),
]


def parse_args(argv: list[str] | None = None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="20,000 rows, 2,000 changes, 3 days, no warm-up runs: a smoke run",
    )
    for flag, kind, text in OPTIONS:
        parser.add_argument(flag, type=kind, help=text)
    parser.add_argument(
        "--retention",
        default="7",
        help="days of tags the upkeeps keep, comma-separated, longest first (default 7)",
    )
    parser.add_argument(
        "--daily-upkeep", type=int, help="the storage days run the upkeep after each day with this retention"
    )
    parser.add_argument(
        "--storage-share",
        type=int,
        help="the storage days replace 1/N of the rows each (default rows/changes)",
    )
    parser.add_argument(
        "--full-images",
        action="store_true",
        help="every update a full row image (binlog_row_image=FULL); default: half the updates partial",
    )
    parser.add_argument(
        "--no-merge-into",
        action="store_true",
        help="time the copy and ours only (no MERGE INTO table written or timed): a shorter run on a busy machine",
    )
    parser.add_argument("--driver-memory", default="6g")
    parser.add_argument(
        "--parts",
        default=",".join(PARTS),
        help=f"what to measure, comma-separated (default all: {','.join(PARTS)})",
    )
    args = parser.parse_args(argv)
    args.rows = args.rows or (20_000 if args.quick else 5_000_000)
    args.changes = args.changes or (2_000 if args.quick else 500_000)
    default_scaling = "10000,40000" if args.quick else "1000000,20000000"
    args.scaling = [int(n) for n in (args.scaling or default_scaling).split(",") if n]
    args.days = args.days or (3 if args.quick else 30)
    args.retention = [min(int(r), args.days) for r in str(args.retention).split(",") if r]
    args.repeat = args.repeat or (1 if args.quick else 2)
    args.parts = [p for p in args.parts.split(",") if p]
    unknown = sorted(set(args.parts) - set(PARTS))
    if unknown:
        parser.error(f"--parts: unknown {unknown}; known: {', '.join(PARTS)}")
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    os.environ.setdefault("SHARP_SPARK_LOG_LEVEL", "ERROR")
    result = run(args)
    print(json.dumps(result, indent=2, default=str))
    return result


if __name__ == "__main__":
    main()
