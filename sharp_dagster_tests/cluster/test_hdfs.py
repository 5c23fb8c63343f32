"""PySpark's own HDFS client (the Hadoop jars pyspark ships) writes and reads an Iceberg table on a real HDFS."""

from __future__ import annotations

import uuid

import pytest

pytestmark = pytest.mark.slow


def test_iceberg_table_on_hdfs_through_spark(spark, hdfs) -> None:
    catalog = f"hdfs_{uuid.uuid4().hex[:8]}"
    warehouse = f"{hdfs.uri}/warehouse_{catalog}"
    # A path-based Iceberg catalog: its metadata and data files both live on HDFS.
    spark.conf.set(f"spark.sql.catalog.{catalog}", "org.apache.iceberg.spark.SparkCatalog")
    spark.conf.set(f"spark.sql.catalog.{catalog}.type", "hadoop")
    spark.conf.set(f"spark.sql.catalog.{catalog}.warehouse", warehouse)
    table = f"{catalog}.db.t"
    spark.sql(f"CREATE TABLE {table} (id BIGINT, name STRING, dt STRING) USING iceberg PARTITIONED BY (dt)")
    rows = [(i, f"n{i}", f"2024-01-0{1 + i % 2}") for i in range(50)]
    spark.createDataFrame(rows, "id BIGINT, name STRING, dt STRING").writeTo(table).append()
    spark.sql(f"DELETE FROM {table} WHERE id < 10")

    back = sorted(tuple(r) for r in spark.table(table).collect())
    assert back == sorted(r for r in rows if r[0] >= 10)
    # The files are on HDFS (as its NameNode lists them), none on the driver's disk.
    files = [r.file_path for r in spark.sql(f"SELECT file_path FROM {table}.files").collect()]
    assert files and all(f.startswith(f"{hdfs.uri}/warehouse_{catalog}/db/t/data/") for f in files), files
    jvm = spark.sparkContext._jvm
    root = jvm.org.apache.hadoop.fs.Path(f"{warehouse}/db/t/metadata")
    fs = root.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    metadata = [s.getPath().getName() for s in fs.listStatus(root)]
    assert any(name.endswith(".metadata.json") for name in metadata), metadata
    assert hdfs.namenode_state()["NumLiveDataNodes"] == 1


def test_done_markers_and_files_on_hdfs(spark, hdfs, tmp_path) -> None:
    from sharp_dagster.cdc.landing.done_markers import DoneMarkers
    from sharp_dagster.spark.filesystem import HadoopFs, LocalFs, file_system

    root = f"{hdfs.uri}/warehouse_markers"
    day_start = 1_704_067_200_000  # 2024-01-01T00:00Z
    markers = DoneMarkers(root, "shop", spark)
    written = markers.write(day_start + 24 * 3_600_000, 0, day_start)
    assert len(written) == 24 and markers.day_complete("2024-01-01")
    assert markers.write(day_start + 24 * 3_600_000, 0, day_start) == []  # each marker is written once

    fs = file_system(root, spark)
    assert isinstance(fs, HadoopFs)
    report = f"{root}/lineage_runs/dwd/t/2024-01-01.json"
    fs.write_text(report, "first")
    fs.write_text(report, "second")  # replaced whole
    assert fs.read_text(report) == "second"
    assert fs.list_files(f"{root}/lineage_runs/dwd/t") == ["2024-01-01.json"]
    assert fs.list_files(f"{root}/missing") == []
    # A plain path and a file:// URI are the local disk, without the JVM.
    assert isinstance(file_system(str(tmp_path)), LocalFs)
    local = file_system(f"file://{tmp_path}")
    local.write_text(f"file://{tmp_path}/a/b.json", "x")
    assert (tmp_path / "a" / "b.json").read_text() == "x"


def test_session_retries_a_file_close_soon(spark) -> None:
    """The session's Hadoop configuration carries the HDFS client's close/add-block retry settings
    (`spark/session.py`): a small file's close waits 25 ms for its first retry, not HDFS's 400 ms default, and
    retries 10 times (25.6 s in all, more than the default's 12.4 s)."""
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    assert conf.get("dfs.client.block.write.locateFollowingBlock.initial.delay.ms") == "25"
    assert conf.get("dfs.client.block.write.locateFollowingBlock.retries") == "10"
