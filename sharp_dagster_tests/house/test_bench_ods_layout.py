"""`bench/bench_ods_layout.py --quick`'s whole path, at a tiny size, in the test session's Spark (a benchmark
process of its own would start a second JVM): every part runs and reports what RESULTS.md is built from."""

from __future__ import annotations

import time

from sharp_dagster.settings import ods_compact_options
from sharp_dagster_tests.conftest import fresh_tables
from sharp_dagster_tests.house.bench_support import BENCH, _load


def test_the_quick_run_measures_every_part(spark, tmp_path):
    bench = _load(BENCH / "bench_ods_layout.py")
    args = bench.parse_args(
        ["--quick", "--rows", "2000", "--changes", "200", "--scaling", "1000", "--days", "2"]
    )
    store = fresh_tables(spark, tmp_path)

    result = bench.measure(store, tmp_path, args, time.perf_counter())

    day = result["day"]
    assert {"copy", "merge_into_mor", "floor_day_rows"} <= set(day) and day["copy"]["best_s"] > 0
    reads = result["reads"]
    assert reads["delete_files_at_tag"] > 0  # the tagged day was read with its deletion vectors
    assert reads["compaction_options"] == ods_compact_options()  # first the upkeep's own compaction
    assert reads["full_compaction"]["data_removed_delete_files_count"] > 0  # then every file with a delete
    assert reads["tags_moved_to_full_compaction"] == ["2024-05-06"]
    assert reads["ratio_tag_after_full_compaction_to_dt_partition"] > 0
    storage = result["storage"]
    assert storage["all_tags_kept"]["copies"] > 1 and storage["after_upkeep_retention_2"]["kept_tags"] == 2
    assert [p["state_rows"] for p in result["scaling"]] == [1000, 2000]
    latency = result["latency"]  # the day's end after hours 00..22 pre-merged, beside the whole day's
    assert latency["same_rows"]["equal"] and latency["same_rows"]["live_rows"] > 0
    assert latency["hourly_premerges"]["calls"] == 3 and latency["premerged"]["best_s"] > 0
    kept = result["storage_premerge"]  # the same days published plain and pre-merged, side by side
    assert kept["same_rows"]["equal"] and kept["same_rows"]["rows"] > 0
    assert kept["premerge_calls_per_day"] == 3 and kept["premerged"]["hourly_total_s"] > 0
    assert len(kept["plain"]["copies_after_each_day"]) == 2 and kept["premerged"]["copies"] > 1
    assert kept["reads"]["ratio_premerged_tag_to_plain_tag_wall"] > 0


def test_the_spark_generator_makes_full_or_partial_update_images(spark, tmp_path):
    """`--full-images` (every update the whole row, binlog_row_image=FULL) changes only the updates' after images:
    the same events, keys and positions; by default a share of the plain updates carries the key and two columns."""
    from pyspark.sql import functions as F

    bench = _load(BENCH / "bench_ods_layout.py")
    fields = F.size(F.json_object_keys("after_json"))
    seen = {}
    for full in (False, True):
        state, changes = tmp_path / f"state_{full}", tmp_path / f"changes_{full}"
        bench.generate_spark(spark, 2000, 1000, str(state), str(changes), full_images=full)
        rows = spark.read.parquet(str(changes))
        seen[full] = {
            "events": sorted(tuple(r) for r in rows.select("event_uid", "op", "before_json").collect()),
            "update_fields": {r[0]: r[1] for r in rows.where("op = 'u'").groupBy(fields).count().collect()},
        }
    assert seen[False]["events"] == seen[True]["events"]
    assert set(seen[True]["update_fields"]) == {7}  # id and the six value columns
    assert set(seen[False]["update_fields"]) == {3, 7} and seen[False]["update_fields"][3] > 100
