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
