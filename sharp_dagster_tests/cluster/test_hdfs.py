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
