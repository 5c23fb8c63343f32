"""ODS upkeep (`cdc/ods/upkeep.py`) on real Iceberg tables: a current-state table written merge-on-read with one
tag per day, compacted and expired; the newest state and the tags inside the retention read as before."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from sharp_dagster.cdc.ods.upkeep import SNAPSHOT_GRACE, refs, tags_to_drop, upkeep_table
from sharp_dagster.cdc.ods.versions import ODS_TABLE_PROPERTIES, day_tag, ods_ref

DAYS = ["2024-03-01", "2024-03-02", "2024-03-03", "2024-03-04", "2024-03-05"]


def _tag(store, ref, name):
    table = store.java_table(ref)
    table.manageSnapshots().createTag(name, table.currentSnapshot().snapshotId()).commit()


def _rows(spark, name, version=None):
    at = f" VERSION AS OF '{version}'" if version else ""
    return sorted(tuple(r) for r in spark.sql(f"SELECT id, v, _binlog_seq FROM {name}{at}").collect())


def _five_days(store, table):
    """ods.<table>: 200 rows on day 1, then each day 10 % of the rows replaced (deletion vectors) and 5 new ones;
    one tag per day. Returns {day: rows of that day}."""
    spark, ref = store.spark, ods_ref(table)
    props = ", ".join(f"'{k}'='{v}'" for k, v in ODS_TABLE_PROPERTIES.items())
    spark.sql("CREATE NAMESPACE IF NOT EXISTS ods")
    spark.sql(
        f"CREATE TABLE {store.name(ref)} (id bigint, v string, _binlog_seq decimal(38,0)) USING iceberg "
        f"TBLPROPERTIES ({props})"
    )
    name = store.name(ref)
    spark.sql(
        f"INSERT INTO {name} SELECT id, 'v0' AS v, CAST(1 AS decimal(38,0)) AS _binlog_seq FROM range(200)"
    )
    _tag(store, ref, day_tag(DAYS[0]))
    expected = {DAYS[0]: _rows(spark, name)}
    for i, day in enumerate(DAYS[1:], start=1):
        # Row-level writes as a day's merge does them: deletes of the replaced rows (deletion vectors), new rows.
        spark.sql(f"DELETE FROM {name} WHERE id % 10 = {i}")
        spark.sql(
            f"INSERT INTO {name} SELECT id, 'v{i}' AS v, CAST({i + 1} AS decimal(38,0)) AS _binlog_seq "
            f"FROM range(200 + 5 * {i}) WHERE id % 10 = {i} OR id >= 200 + 5 * ({i} - 1)"
        )
        _tag(store, ref, day_tag(day))
        expected[day] = _rows(spark, name)
    return ref, expected


def test_upkeep_compacts_main_drops_old_tags_and_keeps_what_the_retention_keeps(table_store):
    store, spark = table_store, table_store.spark
    ref, expected = _five_days(store, "upkeep_orders")
    name = store.name(ref)
    assert spark.sql(f"SELECT count(*) FROM {name}.delete_files").first()[0] > 0  # merge-on-read wrote DVs

    # An hour on: the snapshots are past the grace that protects a scan planned a moment ago.
    later = datetime.now(UTC) + SNAPSHOT_GRACE + timedelta(minutes=1)
    result = upkeep_table(store, ref, retention_days=3, options={"delete-file-threshold": "1"}, now=later)

    assert result.compaction_skipped is None
    assert result.compaction["data_removed_delete_files_count"] > 0, result.to_dict()
    assert spark.sql(f"SELECT count(*) FROM {name}.delete_files").first()[0] == 0  # main reads no deletes
    assert result.dropped_tags == DAYS[:2] and result.kept_tags == 3
    assert result.moved_tags == [DAYS[-1]]  # the newest day reads the compacted files
    assert sorted(n for n, kind in refs(store, ref).items() if kind == "TAG") == DAYS[2:]
    assert _rows(spark, name) == expected[DAYS[-1]]  # the newest state
    for day in DAYS[2:]:  # every tag inside the retention reads its day as published
        assert _rows(spark, name, day) == expected[day]
    # The deletion vectors only the dropped days used are gone (their data files are still the kept tags').
    assert result.expiry["deleted_position_delete_files_count"] > 0, result.to_dict()
    assert result.storage_after["delete_files"] < result.storage_before["delete_files"], result.to_dict()

    again = upkeep_table(
        store, ref, retention_days=3, now=later
    )  # nothing left to drop: a second run changes no tag
    assert again.dropped_tags == [] and again.kept_tags == 3
    assert _rows(spark, name) == expected[DAYS[-1]]


def test_a_staged_day_is_not_compacted_under_and_its_branch_survives_expiry(table_store):
    store, spark = table_store, table_store.spark
    ref, expected = _five_days(store, "upkeep_staged")
    table = store.java_table(ref)
    table.manageSnapshots().createBranch("stage_42", table.currentSnapshot().snapshotId()).commit()
    head = store.current_snapshot_id(ref)

    result = upkeep_table(store, ref, retention_days=10)

    assert "stage_42" in result.compaction_skipped and result.compaction == {}
    assert store.current_snapshot_id(ref) == head  # main did not move: the staged day can still fast-forward
    assert refs(store, ref)["stage_42"] == "BRANCH"
    assert result.dropped_tags == [] and result.kept_tags == 5
    for day in DAYS:
        assert _rows(spark, store.name(ref), day) == expected[day]


def test_retention_below_one_day_is_refused():
    with pytest.raises(ValueError, match="at least 1 day"):
        tags_to_drop(["2024-01-01"], 0)


def test_compaction_rewrites_small_files_unless_told_otherwise(monkeypatch):
    """By default a file is rewritten for its size only under 1 MiB (a kept tag holds a rewritten file's old copy:
    Iceberg's 384 MiB would rewrite most tables whole, and 16 MiB re-packed the packed day files every second
    day); the user's options win, key by key."""
    from sharp_dagster.settings import ODS_COMPACT_OPTIONS_ENV, ods_compact_options

    monkeypatch.delenv(ODS_COMPACT_OPTIONS_ENV, raising=False)
    assert ods_compact_options() == {"min-file-size-bytes": "1048576"}
    monkeypatch.setenv(ODS_COMPACT_OPTIONS_ENV, "min-file-size-bytes=1,delete-file-threshold=2")
    assert ods_compact_options() == {"min-file-size-bytes": "1", "delete-file-threshold": "2"}
    monkeypatch.setenv(ODS_COMPACT_OPTIONS_ENV, "min-file-size-bytes")
    with pytest.raises(ValueError, match=ODS_COMPACT_OPTIONS_ENV):
        ods_compact_options()


def test_the_upkeep_asset_runs_as_a_job_log_attempt(spark, monkeypatch):
    """`ods_upkeep/<table>` through Dagster: materialized, its run in the job log with a step per table."""
    from types import SimpleNamespace

    from dagster import DagsterInstance, materialize

    from sharp_dagster.assets.ods_upkeep import build_ods_upkeep_asset, upkeep_job_name
    from sharp_dagster.logdriven import job_log
    from sharp_dagster.resources.spark import SparkResource

    resource = SparkResource()
    store = resource.store()  # the warehouse of the environment, as a run's
    ref, expected = _five_days(store, "upkeep_asset")
    monkeypatch.setenv("SHARP_ODS_TAG_RETENTION_DAYS", "2")
    upkeep = build_ods_upkeep_asset(SimpleNamespace(name="upkeep_asset"))

    result = materialize([upkeep], resources={"spark": resource}, instance=DagsterInstance.ephemeral())

    assert result.success
    metadata = result.asset_materializations_for_node(upkeep.op.name)[0].metadata
    assert metadata["retention_days"].value == 2 and metadata["dropped_tags"].value == 3
    jl = job_log()
    run = jl.last_success(upkeep_job_name("upkeep_asset"), order_by_range=False)
    steps = {s.step_id: s for s in jl.steps(run.job_id)}
    assert (
        set(steps) == {"ods"}
        and '"dropped_tags": ["2024-03-01", "2024-03-02", "2024-03-03"]' in steps["ods"].output
    )
    assert _rows(spark, store.name(ref)) == expected[DAYS[-1]]
