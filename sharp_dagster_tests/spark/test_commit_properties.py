"""`spark/commit_properties.with_snapshot_properties` on real Iceberg tables (the shared Spark session): SQL commits
made inside carry the properties, a commit another Python thread makes meanwhile does not, and an error inside comes
out as itself with nothing left set."""

from __future__ import annotations

import threading

import pytest
from pyspark.errors import AnalysisException

from sharp_dagster.spark.commit_properties import with_snapshot_properties
from sharp_dagster.spark.tables import TableRef
from sharp_dagster.spark.wap import snapshot_properties


def _summary(store, ref: TableRef, name: str) -> dict[str, str]:
    """The `sharp.*` part of the summary of the snapshot at branch (or `main`) `name`."""
    store.refresh(ref)
    table = store.java_table(ref)
    summary = dict(table.snapshot(table.refs().get(name).snapshotId()).summary())
    return {str(k): str(v) for k, v in summary.items() if str(k).startswith("sharp.")}


def test_sql_commits_inside_carry_the_properties_and_no_other_thread_does(table_store):
    store, spark = table_store, table_store.spark
    ref = TableRef("ods", "props_t", ())
    name = store.name(ref)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {store.catalog}.ods")
    spark.sql(f"CREATE TABLE {name} (id bigint, v string) USING iceberg")
    spark.sql(f"INSERT INTO {name} VALUES (1, 'a'), (2, 'b')")
    store.commit_refs(ref, lambda t: t.manageSnapshots().createBranch("stage_props"))
    props = snapshot_properties("7", {"job_id": "job-7", "day": "2024-01-02"})
    other: dict[str, str] = {}

    def merge_while_another_thread_commits() -> str:
        spark.sql(
            f"MERGE INTO {name}.`branch_stage_props` t USING (SELECT 1 AS id, 'z' AS v) s ON t.id = s.id "
            "WHEN MATCHED THEN UPDATE SET t.v = s.v"
        )
        merged = _summary(store, ref, "stage_props")
        thread = threading.Thread(target=lambda: spark.sql(f"INSERT INTO {name} VALUES (3, 'c')").collect())
        thread.start()
        thread.join()
        other.update(_summary(store, ref, "main"))
        spark.sql(f"INSERT INTO {name}.`branch_stage_props` VALUES (4, 'd')")
        return merged

    merged = with_snapshot_properties(spark, props, merge_while_another_thread_commits)
    assert merged == {"sharp.token": "7", "sharp.job_id": "job-7", "sharp.day": "2024-01-02"}
    assert _summary(store, ref, "stage_props") == merged  # the INSERT INTO after the thread's commit
    assert other == {}, "another thread's commit meanwhile names no attempt"

    def bad_sql() -> None:
        spark.sql(f"SELECT no_such_column FROM {name}").collect()

    with pytest.raises(AnalysisException, match="no_such_column"):
        with_snapshot_properties(spark, props, bad_sql)
    with pytest.raises(RuntimeError, match="not nested"):  # the inner call would clear the outer's properties
        with_snapshot_properties(spark, props, with_snapshot_properties, spark, props, bad_sql)
    spark.sql(f"INSERT INTO {name}.`branch_stage_props` VALUES (5, 'e')")
    assert _summary(store, ref, "stage_props") == {}, "nothing left set after the call"
