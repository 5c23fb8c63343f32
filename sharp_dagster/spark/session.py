"""Build the one SparkSession a process uses.

Local mode by default (`local[2]`), or any master from `SHARP_SPARK_MASTER` (e.g. `spark://host:7077`), with extra
Spark conf from `SHARP_SPARK_CONF`. The warehouse's tables are Apache Iceberg tables in the catalog `sharp`, the
session's default catalog (so SQL names them `ods.orders`): data under the warehouse directory, the catalog itself in
the job log's database (SQLite or PostgreSQL, JDBC), so any number of processes and machines share it; see
`sharp_dagster.spark.catalog.catalog_conf`. Spark's built-in catalog (`spark_catalog`) keeps only session-local
source tables (the sample shop's JSON files).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pyspark import SparkContext
from pyspark.sql import SparkSession

from sharp_dagster import jvm
from sharp_dagster.settings import Settings, spark_driver_host, spark_jars, spark_log_level, warehouse_uri
from sharp_dagster.spark import class_archive
from sharp_dagster.spark.catalog import catalog_conf, provide_password_file
from sharp_dagster.spark.py4j_names import remember_names

LOG4J_CONF = Path(__file__).with_name("log4j2.properties")

DEFAULT_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    # dt / hour partition values stay strings: '2024-01-01' is a key, not a DATE to be re-formatted.
    "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.legacy.createHiveTableByDefault": "false",
    # Tables discover their partitions from the folders (other processes add partitions all the time).
    "spark.sql.hive.manageFilesourcePartitions": "false",
    "spark.driver.memory": "2g",
    # PySpark otherwise records the Python call site of every Column function (several JVM round trips each):
    # the merge builds thousands of them per table, and Spark's own error messages still name the expression.
    "spark.python.sql.dataFrameDebugging.enabled": "false",
    # HDFS: a file's close asks the NameNode to complete its last block and, until the DataNode has reported it,
    # retries after 400 ms (doubling, 5 tries: 12.4 s in all). The warehouse writes many small files (a month's
    # hourly landing: 2,880, and a done marker per hour), so that first wait was most of the production profile's
    # backfill (bench/RESULTS.md `profiles`: 423 ms vs 34 ms per small file). Sooner and more retries: 25 ms
    # doubling, 10 tries, 25.6 s in all. Ignored by other file systems; a user's value in SHARP_SPARK_CONF wins.
    "spark.hadoop.dfs.client.block.write.locateFollowingBlock.initial.delay.ms": "25",
    "spark.hadoop.dfs.client.block.write.locateFollowingBlock.retries": "10",
}
# Whole-stage code for wide aggregates (many data-quality rules in one scan) exceeds HotSpot's 8000-byte JIT limit
# and would run interpreted; let the JIT compile it (drivers and executors).
COMPILE_HUGE_METHODS = "-XX:-DontCompileHugeMethods"


def driver_java_options(*extra: str, archive: bool = True) -> str:
    """`spark.driver.extraJavaOptions` of the project's drivers: the JIT's, the class archive's (unless `archive`
    is False: `class_archive_build` writes one), the quiet log4j configuration at quiet levels, then `extra`.

    A caller that passes its own `spark.driver.extraJavaOptions` to `build_spark_session` builds it here, so its
    driver differs from the others only by what it asks for."""
    options = [COMPILE_HUGE_METHODS, *(class_archive.driver_java_options() if archive else [])]
    if spark_log_level() in {"ERROR", "OFF", "FATAL"}:
        options.append(f"-Dlog4j2.configurationFile=file:{LOG4J_CONF}")
    return " ".join([*options, *extra])


def build_spark_session(
    settings: Settings | None = None, app_name: str = "sharp_dagster", **conf: str
) -> SparkSession:
    """Return the process's SparkSession, creating it on first call.

    `conf` overrides the defaults and `SHARP_SPARK_CONF`; keys use underscores for dots is *not* supported on
    purpose: pass real Spark keys through `**{"spark.x": "y"}`.
    """
    settings = settings or Settings.from_env()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    merged = dict(DEFAULT_CONF)
    merged["spark.sql.warehouse.dir"] = warehouse_uri(settings.warehouse_dir)
    merged["spark.driver.extraJavaOptions"] = driver_java_options()
    merged["spark.executor.extraJavaOptions"] = COMPILE_HUGE_METHODS
    if settings.spark_master.startswith("spark://"):
        # Executors on a cluster must reach the driver; on one machine that is loopback.
        merged.setdefault("spark.driver.host", spark_driver_host())
        merged.setdefault("spark.driver.bindAddress", spark_driver_host())
        merged.setdefault("spark.executor.memory", "512m")
    jars = _extra_jars(uses_packages="spark.jars.packages" in {**settings.spark_conf, **conf})
    if jars:
        merged["spark.jars"] = ",".join(jars)
    user_conf = {**settings.spark_conf, **conf}
    merged.update(_local_fs_conf(user_conf))
    if SparkContext._active_spark_context is None:
        # Only when the session is created: getOrCreate() would write these into a running session's conf, where
        # Spark keeps the catalog it already loaded, so `use_warehouse` would take it for another warehouse's.
        merged.update(catalog_conf(settings, make_default=True))
    merged.update(settings.spark_conf)
    merged.update(conf)
    builder = SparkSession.builder.master(settings.spark_master).appName(app_name)
    for key, value in merged.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    remember_names(SparkContext, SparkContext._gateway)
    spark._jvm = SparkContext._jvm  # the session's own copy of the context's view, made when it was created
    # The session active on the calling thread too: Spark loads a catalog with the conf of the thread's active
    # session, and a thread that has none (a source's table thread opening the warehouse at its claim:
    # `publish/warehouse.py`) would not see a catalog set at runtime (`catalog.use_warehouse`): CATALOG_NOT_FOUND.
    spark._jvm.SparkSession.setActiveSession(spark._jsparkSession)
    provide_password_file(spark)  # the catalog's password: a file the JDBC driver reads, never Spark conf
    level = spark_log_level()
    spark.sparkContext.setLogLevel(level if level != "OFF" else "ERROR")
    return spark


def _local_fs_conf(user_conf: dict[str, str]) -> dict[str, str]:
    """Hadoop's local file system without a `chmod` process per file (`jvm.LOCAL_FS_CLASS`), where it can load.

    Its jar goes on the driver's and the executors' class path (on a cluster, workers need it at the same path).
    Nothing when the jar was not compiled, when the user sets `fs.file.impl` or a class path of their own, or
    when this process's JVM was launched without it: Hadoop's own local file system is used then.
    """
    jar = jvm.local_fs_jar()
    mine = {"spark.hadoop.fs.file.impl", "spark.driver.extraClassPath", "spark.executor.extraClassPath"}
    if jar is None or mine & user_conf.keys():
        return {}
    gateway = SparkContext._gateway
    if gateway is not None:  # the JVM is up: its class path is fixed
        try:
            gateway.jvm.java.lang.Class.forName(jvm.LOCAL_FS_CLASS)
        except Exception:  # noqa: BLE001 - launched without the jar
            return {}
    return {
        "spark.driver.extraClassPath": str(jar),
        "spark.executor.extraClassPath": str(jar),
        "spark.hadoop.fs.file.impl": jvm.LOCAL_FS_CLASS,
    }


def _extra_jars(uses_packages: bool = False) -> list[str]:
    """The project's Maven-fetched Spark jars (`jvm/pom.xml`, module `spark`), `SHARP_SPARK_JARS`, and the JDBC
    driver the CDC snapshot needs when present (Debian's libmariadb-java).

    A user who resolves the same packages through `spark.jars.packages` (in `SHARP_SPARK_CONF`) needs no local
    copy; otherwise a missing copy is an error that says how to fetch it.
    """
    jars = spark_jars()
    if not uses_packages:
        jars += [str(j) for j in jvm.jars("spark") if str(j) not in jars]
    mariadb = Path("/usr/share/java/mariadb-java-client.jar")
    if mariadb.exists() and str(mariadb) not in jars:
        jars.append(str(mariadb))
    return jars
