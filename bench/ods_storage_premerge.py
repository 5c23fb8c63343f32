"""`bench_ods_layout.py --parts storage_premerge` (issue 44): issue 33's storage and tagged-read figures for days
published through the ODS asset's own path, plain and pre-merged side by side in one run.

Two ODS tables start from the same state (`merge.write_state`, the previous day's tag); then, for each of D days,
the same changes of the day (a share 1/S of the rows: 85 % full-image updates, 10 % inserts, 5 % deletes, spread
over the 24 hours; positions newer each day) land as typed images
(`write_typed_images`, the landing's own writer), and:

- `plain`: the day's changes read, staged by `ods_stage.stage` (the whole day merged on `stage_<day>_<n>`) and
  published, as the ODS asset does for a table without `premerge`;
- `premerged`: hours 00..22 merged as they land (`premerge.premerge_hours` after each hour's done marker, `every`
  hours a call: 1 as the landing runs it), then the same stage and publish, which merge only hour 23 onto the
  pre-merge branch (`stage_premerged`): the day's tag is built from about 24 commits.

After each day both tables get the daily upkeep (`upkeep_table` on `ods.<table>` and `ods_state.<table>`, the
project's compaction options and retention), as `ods_upkeep_schedule` runs it. Measured: the bytes and files every
kept snapshot holds (both tables) as copies of the first state, after each day; the work of each path; then the
DWD-like read (`DWD_READ`) of each path's newest tag against a fresh copy of the same rows, alternated; and the two
tags compared row for row.
"""

from __future__ import annotations

import json
import sys
from datetime import date, timedelta

import bench_merge as bm
from ods_latency import premerge_calls, publish_day

PATHS = ("plain", "premerged")


def day_of(d: int) -> str:
    """Day `d` (1: the benchmark's `DAY`) as an ISO date."""
    return (date.fromisoformat(bm.PREVIOUS) + timedelta(days=d)).isoformat()


def day_changes_raw(spark, rows: int, changes: int, d: int):
    """Raw Canal-style binlog rows of day `d`: `changes` events over the 24 hours. Updates hit even keys (never
    deleted), deletes odd keys (each once over the days), inserts keys above the state's; positions are in binlog
    file `1 + d`, newer than every earlier day's and the state's."""
    ff, pf, day = bm.FILE_FACTOR, bm.POS_FACTOR, day_of(d)
    half = max(1, rows // 2)
    image = (
        f"to_json(named_struct('id', CAST(target AS STRING), 'name', concat('day{d}-', i), 'amount', "
        "format_string('%.2f', CAST((i % 99999) / 100.0 AS DOUBLE)), 'qty', CAST(i % 777 AS STRING), "
        f"'status', 'DAY{d}', 'updated_at', '2024-05-06 07:08:09', 'note', sha1(CAST(i AS STRING))))"
    )
    return spark.sql(f"""
        WITH ev AS (
            SELECT i, i * 100 + 4 AS pos,
                   CASE WHEN h % 100 < 10 THEN 'c' WHEN h % 100 < 15 THEN 'd' ELSE 'u' END AS op,
                   CASE WHEN h % 100 < 10 THEN {4 * rows} + {d * changes} + i
                        WHEN h % 100 < 15 THEN pmod(2 * ({d * changes} + i) + 1, {2 * half})
                        ELSE 2 * pmod(h2, {half}) END AS target
            FROM (SELECT id AS i, pmod(xxhash64(id, {d}), 2147483647) AS h,
                         pmod(xxhash64(id + 7, {d}), 2147483647) AS h2 FROM range(0, {changes}))
        )
        SELECT 'src1' AS source_id, 'mysql-bin.{1 + d:06d}' AS binlog_file, CAST({1 + d} AS BIGINT) AS binlog_file_seq,
               CAST(pos AS BIGINT) AS binlog_pos, 0 AS row_idx,
               CAST({1 + d} * CAST({ff} AS DECIMAL(38,0)) + pos * {pf} AS DECIMAL(38,0)) AS binlog_seq,
               CAST(NULL AS STRING) AS gtid, sha1(concat('src1|mysql-bin.{1 + d:06d}|', pos, '|0')) AS event_uid,
               CAST({1714953600000 + (d - 1) * 86400000} + (i * 86400000) div {changes} AS BIGINT) AS event_ts_ms,
               op, 'shop' AS source_db, 'orders' AS source_table, array('id') AS pk_names,
               CASE WHEN op <> 'c' THEN to_json(named_struct('id', CAST(target AS STRING))) END AS before_json,
               CASE WHEN op <> 'd' THEN {image} END AS after_json,
               CAST(NULL AS STRING) AS ddl_sql, 'binlog.shop' AS kafka_topic, CAST(0 AS INT) AS kafka_partition,
               CAST(i AS BIGINT) AS kafka_offset, CAST(0 AS BIGINT) AS ingest_ts_ms, 'orders' AS table_name,
               '{day}' AS dt, lpad(CAST((i * 24) div {changes} AS STRING), 2, '0') AS hour
        FROM ev
    """)


class Paths:
    """The two ODS tables (`ods.storage_<path>_<rows>`) and the day's images (`binlog_images.storage<rows>__orders`)."""

    def __init__(self, ds, clock, layout, every: int = 1):
        from sharp_dagster.cdc.ods import merge as ods_merge
        from sharp_dagster.cdc.ods import store as ods_store
        from sharp_dagster.cdc.ods.upkeep import ods_upkeep_refs

        self.ds, self.clock, self.layout, self.every = ds, clock, layout, every
        self.images_db = f"storage{ds.rows}"
        self.tables = {p: f"storage_{p}_{ds.rows}" for p in PATHS}
        for table in self.tables.values():
            for ref in ods_store.both(table):
                ds.store.drop_table(ref)
            ods_merge.write_state(ds.store, table, bm.PREVIOUS, ds.base_state(), ["id"])
        self.refs = {p: ods_upkeep_refs(ds.store, t) for p, t in self.tables.items()}
        self.one_copy = self.held("plain")["bytes"]
        self.runs = 0

    def held(self, path: str) -> dict:
        """Bytes and files every kept snapshot of both tables of `path` holds."""
        from sharp_dagster.cdc.ods.upkeep import storage

        out = {"bytes": 0, "data_files": 0, "delete_files": 0}
        for ref in self.refs[path]:
            self.ds.store.refresh(ref)
            for key, value in storage(self.ds.store, ref).items():
                out[key] = out.get(key, 0) + value
        return out

    def land(self, d: int, changes: int) -> str:
        from sharp_dagster.cdc.landing.image_tables import write_typed_images

        raw = day_changes_raw(self.ds.spark, self.ds.rows, changes, d)
        write_typed_images(self.ds.store, self.images_db, raw, [bm.TABLE], known={bm.TABLE: bm.COLUMNS})
        return day_of(d)

    def changes(self, day: str, hours=None):
        from pyspark.sql import functions as F

        from sharp_dagster.cdc.landing.image_tables import read_typed_images
        from sharp_dagster.spark.checkpoint import checkpoint

        frame = read_typed_images(self.ds.store, self.images_db, bm.TABLE, day)
        if hours is not None:
            frame = frame.where(F.col("hour").isin(*hours))
        frame = checkpoint(frame)
        frame.count()
        return frame

    def premerge(self, day: str) -> list[dict]:
        """Hours 00..22 of `day` pre-merged as they are marked done, `every` hours a call."""
        table = self.tables["premerged"]
        return premerge_calls(
            self.clock, self.ds.store, table, day, lambda done: self.changes(day, done), self.every
        )

    def publish(self, path: str, day: str) -> None:
        """What runs after the day's last done marker: the day read, staged, published (the ODS asset's path)."""
        self.runs += 1
        publish_day(self.ds.store, self.tables[path], day, self.changes(day), f"stage_{day}_{self.runs}")

    def upkeep(self, path: str, retention: int) -> int:
        """The daily upkeep of both tables of `path`; returns the data files its compactions rewrote."""
        from sharp_dagster.cdc.ods.upkeep import upkeep_table
        from sharp_dagster.settings import ods_compact_options

        rewritten = 0
        for ref in self.refs[path]:
            now = self.layout.bm_now_plus_grace()
            kept = upkeep_table(self.ds.store, ref, retention, ods_compact_options(), now=now)
            rewritten += kept.compaction.get("data_rewritten_data_files_count", 0)
        return rewritten


def storage_paths(
    ds, clock, layout, days: int, share: int, retention: int, repeat: int, every: int = 1
) -> dict:
    """`days` days through both paths (interleaved day by day), the daily upkeep after each; then the storage,
    the newest tags' reads against a fresh copy, and the two tags compared. `layout`: `bench_ods_layout`'s
    `PROPS`, `alternated_reads` and `bm_now_plus_grace`."""
    p = Paths(ds, clock, layout, every)
    changes = max(24, round(ds.rows / share))
    track = {path: {"copies": [], "files": [], "compactions": 0, "work": []} for path in PATHS}
    premerges: list[dict] = []
    for d in range(1, days + 1):
        day = p.land(d, changes)
        for path in PATHS:
            hourly = p.premerge(day) if path == "premerged" else []
            premerges.extend(hourly)
            end = clock.time(lambda path=path, day=day: p.publish(path, day))
            t = track[path]
            t["work"].append({"day_end": end, "hourly": hourly})
            t["compactions"] += bool(p.upkeep(path, retention))
            held = p.held(path)
            t["copies"].append(round(held["bytes"] / p.one_copy, 3))
            t["files"].append([held["data_files"], held["delete_files"]])
        progress = {"storage_premerge_day": d, **{k: track[k]["copies"][-1] for k in PATHS}}
        print(json.dumps(progress), file=sys.stderr, flush=True)
    out = {
        "state_rows": ds.rows,
        "days": days,
        "changes_per_day": changes,
        "rows_changed_per_day_share": round(changes / ds.rows, 5),
        "retention": retention,
        "premerge_calls_per_day": len(range(every, 23 + every, every)),
        "one_copy_bytes": p.one_copy,
    }
    for path in PATHS:
        t = track[path]
        held = p.held(path)
        ends = [w["day_end"] for w in t["work"]]
        out[path] = held | {
            "copies": round(held["bytes"] / p.one_copy, 3),
            "copies_after_each_day": t["copies"],
            "data_and_delete_files_after_each_day": t["files"],
            "days_with_compaction": t["compactions"],
            "day_end_total_s": round(sum(e["s"] for e in ends), 1),
            "day_end_total_cpu_s": round(sum(e["cpu_s"] for e in ends), 1),
        }
    out["premerged"]["hourly_total_s"] = round(sum(r["s"] for r in premerges), 1)
    out["premerged"]["hourly_total_cpu_s"] = round(sum(r["cpu_s"] for r in premerges), 1)
    out["ratio_premerged_to_plain_bytes"] = round(out["premerged"]["bytes"] / out["plain"]["bytes"], 3)
    out["reads"] = newest_tags_read(p, day_of(days), clock, repeat)
    out["same_rows"] = same_rows(p, day_of(days))
    return out


def newest_tags_read(p: Paths, day: str, clock, repeat: int) -> dict:
    """The DWD-like read of each path's newest tag vs a fresh copy of the same rows, alternated."""
    from sharp_dagster.cdc.ods.versions import day_tag, ods_ref
    from sharp_dagster.spark.tables import TableRef

    store = p.ds.store
    tag = {path: f"{store.name(ods_ref(p.tables[path]))} VERSION AS OF '{day_tag(day)}'" for path in PATHS}
    fresh = TableRef("bench", f"fresh_premerge_{p.ds.rows}", ())
    store.drop_table(fresh)
    writer = p.ds.spark.sql(f"SELECT * FROM {tag['plain']}").writeTo(store.name(fresh)).using("iceberg")
    for key, value in p.layout.PROPS.items():
        writer = writer.tableProperty(key, value)
    writer.create()
    sources = {"fresh_copy": store.name(fresh)} | {f"{path}_tag": tag[path] for path in PATHS}
    out = {
        name: bm.summary(r)
        for name, r in p.layout.alternated_reads(p.ds.spark, sources, clock, repeat).items()
    }
    for path in PATHS:
        files = p.ds.spark.sql(f"SELECT count(*) FROM {store.name(ods_ref(p.tables[path]))}.files").first()[0]
        out[f"{path}_main_files"] = files
        for measure, key in (("best_s", "wall"), ("cpu_best_s", "cpu")):
            ratio = out[f"{path}_tag"][measure] / out["fresh_copy"][measure]
            out[f"ratio_{path}_tag_to_fresh_copy_{key}"] = round(ratio, 3)
    out["ratio_premerged_tag_to_plain_tag_wall"] = round(
        out["premerged_tag"]["best_s"] / out["plain_tag"]["best_s"], 3
    )
    store.drop_table(fresh)
    return out


def same_rows(p: Paths, day: str) -> dict:
    """Both paths' tags of `day`, row for row (live rows and tombstones, `exceptAll` both ways)."""
    from sharp_dagster.cdc.ods import store as ods_store
    from sharp_dagster.cdc.ods.versions import day_tag

    a, b = (ods_store.state_at(p.ds.store, p.tables[path], day_tag(day)) for path in PATHS)
    out = {"rows": a.count(), "differing": a.exceptAll(b).count() + b.exceptAll(a).count()}
    out["equal"] = out["differing"] == 0
    return out
