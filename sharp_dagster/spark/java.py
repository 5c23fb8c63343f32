"""The Java side of PySpark objects, reached through Py4J: the session's JVM, its Java `SparkSession`, a
DataFrame's Java `Dataset`.

PySpark keeps these under private names (`sparkContext._jvm`, `_jsparkSession`, `_jdf`); this module is the
package's one door to them, so no module outside `spark/` touches a private member of another
(`sharp_dagster_tests/house/test_private_members.py`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # importing this module loads no PySpark (the command line's fast paths import it)
    from pyspark.sql import DataFrame, SparkSession


def jvm(spark: SparkSession) -> Any:
    """The Py4J view of the session's JVM: `jvm(spark).java.lang.System`, `jvm(spark).org.apache.iceberg...`."""
    return spark.sparkContext._jvm


def java_session(spark: SparkSession) -> Any:
    """The session's Java `org.apache.spark.sql.SparkSession` (its parser, analyzer and session state)."""
    return spark._jsparkSession


def java_dataset(df: DataFrame) -> Any:
    """The DataFrame's Java `Dataset` (its query execution: the plans and their statistics)."""
    return df._jdf


def on_driver(df: DataFrame, limit: int | None = None) -> DataFrame | None:
    """`df` computed now and held on the driver as a local relation (its rows collected inside the JVM: no value
    passes through Python), or None when it has more than `limit` rows. Projections and filters of the result are
    evaluated by the optimizer on the driver (no Spark job); a small frame's statistics are its exact size."""
    from pyspark.sql import DataFrame as PyDataFrame

    jdf = java_dataset(df if limit is None else df.limit(limit + 1))
    rows = jdf.collectAsList()
    if limit is not None and rows.size() > limit:
        return None
    return PyDataFrame(java_session(df.sparkSession).createDataFrame(rows, jdf.schema()), df.sparkSession)
