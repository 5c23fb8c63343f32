"""Where the project's JVM packages are on this machine.

The packages are pinned in `jvm/pom.xml` (one place) and copied by `scripts/bootstrap.sh` with Maven into
`jvm/lib/<module>/` (`SHARP_JVM_LIB_DIR` overrides the folder). The modules:

- `spark`: jars every Spark session gets through `spark.jars` (Spark's Kafka source), local and cluster alike;
- `kafka`: the classpath of the Apache Kafka broker that the demo and the tests start.
- `hdfs` (the pom's `test` profile, fetched by `scripts/bootstrap.sh test`): the classpath of the HDFS NameNode and
  DataNode the tests start (`sharp_dagster.servers.hdfs`).
- `s3` (the `test` profile too): Hadoop's S3A file system and the AWS SDK modules it calls, for the `s3a://`
  warehouse test (its Spark session gets them through `SHARP_SPARK_JARS`).

Beside them, `jvm/lib/localfs/` holds the one class of our own (`jvm/localfs/`, compiled by the bootstrap against
the Hadoop API jar PySpark ships): Hadoop's local file system without a `chmod` process per file it creates.

Nothing here imports Spark or Dagster.
"""

from __future__ import annotations

import os
from pathlib import Path

from sharp_dagster.settings import REPO_ROOT, jvm_lib_dir

POM = REPO_ROOT / "jvm" / "pom.xml"


class JvmPackagesMissing(RuntimeError):
    """The Maven-fetched jars are not there: the bootstrap has not run (or failed)."""


def lib_dir() -> Path:
    return jvm_lib_dir()


def jars(module: str) -> list[Path]:
    """The jars of one module of `jvm/pom.xml`, sorted by name; a clear error when they were never fetched."""
    folder = lib_dir() / module
    found = sorted(folder.glob("*.jar"))
    if not found:
        raise JvmPackagesMissing(
            f"no jars in {folder}: fetch the JVM packages with `scripts/bootstrap.sh` "
            f"(it runs `mvn -f {POM} dependency:copy-dependencies`)"
        )
    return found


def classpath(module: str) -> str:
    """A Java classpath of one module's jars."""
    return os.pathsep.join(str(j) for j in jars(module))


LOCAL_FS_CLASS = "io.sharpdagster.hadoop.PosixLocalFileSystem"


def local_fs_jar() -> Path | None:
    """The jar of `LOCAL_FS_CLASS`, or None when the bootstrap has not compiled it (Hadoop's own is used then)."""
    jar = lib_dir() / "localfs" / "sharp-localfs.jar"
    return jar if jar.is_file() else None
