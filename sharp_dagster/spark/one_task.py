"""A small DataFrame read as one Spark partition, so that a global aggregate over it is one Spark job.

Under adaptive query execution a global aggregate (a count, the rules' merged scan) over several partitions runs as
two jobs: the exchange's map stage is submitted as a job of its own, then the result. Over one partition there is
no exchange. `coalesce(1)` concatenates the partitions in their order: the same rows in the same order, so every
value computed over them is the same. A big frame keeps its partitions, so its aggregate runs on every core; the
caller decides what is small (a row count it knows, or the partitions of a checkpointed frame).

A frame of many small pieces (a range's hourly files, a union of days) is read in as many partitions as the session
has cores (`on_the_cores`): every stage over it would otherwise run a task per piece.
"""

from __future__ import annotations

from pyspark.sql import DataFrame


def one_task(df: DataFrame, small: bool) -> DataFrame:
    """`df` as one Spark partition when `small`, else as it is."""
    return df.coalesce(1) if small else df


def on_the_cores(df: DataFrame) -> DataFrame:
    """`df` in at most as many partitions as the session has cores (`coalesce`: the same rows, no shuffle)."""
    return df.coalesce(max(1, df.sparkSession.sparkContext.defaultParallelism))
