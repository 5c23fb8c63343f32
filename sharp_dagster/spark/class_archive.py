"""The Spark driver's class-data-sharing archive (the JDK's dynamic AppCDS): a driver starts in ~0.6x the CPU.

A Spark driver loads and verifies thousands of classes from Spark's jars before its first job: a local session with one
Iceberg read took ~18 CPU-s to start on this project's 2-core machines. Every process that runs Spark pays it (a
Dagster run worker, a CLI command, a test's subprocess). The JDK can map those classes, already parsed and verified,
from an archive written by one earlier JVM of the same class path (`-XX:ArchiveClassesAtExit`, JDK 13+); the same
start then took ~11 CPU-s (`bench/RESULTS.md`, section `driver_start`: 0.62x the CPU with both JIT tiers).

- `scripts/bootstrap.sh` writes the archive once (`python -m sharp_dagster.spark.class_archive_build`): a driver built by
  `session.build_spark_session`, so with the class path every driver has, runs a small warehouse workload (an
  Iceberg table written, merged, deleted from and read through the JDBC catalog) and writes what it loaded at its
  exit. A fingerprint beside the archive (the Java runtime, PySpark's jars, the project's jars) rebuilds it only
  when one of them changed.
- `driver_java_options()` gives every driver `-XX:SharedArchiveFile` when the archive is there. The JVM checks the
  archive against its own runtime and class path and quietly runs without it when they differ (its CDS log lines are
  off: they would land on the stdout of a CLI printing JSON).

Nothing here imports Dagster.
"""

from __future__ import annotations

from pathlib import Path

from sharp_dagster import jvm

ARCHIVE_NAME = "spark-driver.jsa"
# The JVM's "archive not usable" warnings go to stdout; a mismatch only costs the speed-up.
QUIET = ["-Xlog:cds=off", "-Xlog:cds+dynamic=off"]


def archive_path() -> Path:
    return jvm.lib_dir() / "cds" / ARCHIVE_NAME


def driver_java_options() -> list[str]:
    """The driver JVM's options to start from the archive; none when it was never built."""
    path = archive_path()
    if not path.is_file():
        return []
    return [f"-XX:SharedArchiveFile={path}", *QUIET]
