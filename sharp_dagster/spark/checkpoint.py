"""Materialize a DataFrame once and cut its lineage, in a way that survives the loss of an executor.

Local mode keeps Spark's `localCheckpoint` (blocks in this process's block manager: the fastest, and an executor
cannot be lost without the driver). On a cluster a local checkpoint's blocks live only in the executor that
computed them: a lost worker takes them with it and the job fails (`CHECKPOINT_RDD_BLOCK_ID_NOT_FOUND`) instead of
being rescheduled. There the checkpoint is a reliable one, written to `_checkpoints/` under the session's warehouse
(its file system: HDFS, S3A ...), removed by Spark's cleaner once the DataFrame is gone.
"""

from __future__ import annotations

from pyspark.sql import DataFrame

from sharp_dagster.spark.java import java_dataset, java_session

CHECKPOINT_FOLDER = "_checkpoints"


def checkpoint(df: DataFrame) -> DataFrame:
    """`df` computed now (eager), its plan cut: a local checkpoint in local mode, a reliable one on a cluster."""
    sc = df.sparkSession.sparkContext
    if sc.master.startswith("local"):
        return df.localCheckpoint(eager=True)
    jsc = sc._jsc.sc()  # type: ignore[union-attr]
    if jsc.getCheckpointDir().isEmpty():
        warehouse = df.sparkSession.conf.get("spark.sql.warehouse.dir").rstrip("/")
        sc.setCheckpointDir(f"{warehouse}/{CHECKPOINT_FOLDER}")
    return df.checkpoint(eager=True)


def on_driver(df: DataFrame, limit: int | None = None) -> DataFrame | None:
    """`df` computed now and held on the driver as a local relation (its rows collected inside the JVM: no value
    passes through Python), or None when it has more than `limit` rows. For a small frame in place of `checkpoint`:
    projections and filters of the result are evaluated by the optimizer on the driver (no Spark job), and its
    statistics are its exact size."""
    jdf = java_dataset(df if limit is None else df.limit(limit + 1))
    rows = jdf.collectAsList()
    if limit is not None and rows.size() > limit:
        return None
    return DataFrame(java_session(df.sparkSession).createDataFrame(rows, jdf.schema()), df.sparkSession)
