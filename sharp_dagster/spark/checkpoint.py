"""Materialize a DataFrame once and cut its lineage, in a way that survives the loss of an executor.

Local mode keeps Spark's `localCheckpoint` (blocks in this process's block manager: the fastest, and an executor
cannot be lost without the driver). On a cluster a local checkpoint's blocks live only in the executor that
computed them: a lost worker takes them with it and the job fails (`CHECKPOINT_RDD_BLOCK_ID_NOT_FOUND`) instead of
being rescheduled. There the checkpoint is a reliable one, written to `_checkpoints/` under the session's warehouse
(its file system: HDFS, S3A ...), removed by Spark's cleaner once the DataFrame is gone.
"""

from __future__ import annotations

from pyspark.sql import DataFrame

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
