"""Build the Spark driver's class-data-sharing archive (`class_archive`): `python -m sharp_dagster.spark.class_archive_build`.

A driver built by `session.build_spark_session` (so with the class path every driver has) runs a small warehouse
workload and, with `-XX:ArchiveClassesAtExit`, writes every class it loaded as it exits. Its fingerprint (the Java
runtime and the driver's jars) is kept beside the archive, so an unchanged machine does not even start the JVM.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pyspark

from sharp_dagster import jvm
from sharp_dagster.spark.class_archive import ARCHIVE_NAME, QUIET, archive_path
from sharp_dagster.spark.session import build_spark_session, driver_java_options

RUNTIME_PROPERTIES = ("java.home =", "java.vm.version =", "java.vm.name =")


def fingerprint() -> str:
    """What the archive depends on: the Java runtime and the driver's jars (names, sizes, times)."""
    shown = subprocess.run(
        ["java", "-XshowSettings:properties", "-version"], capture_output=True, text=True, check=True
    ).stderr
    # Which runtime, not how it was started ("Picked up JDK_JAVA_OPTIONS", "emulated-client" under C1 alone).
    java = sorted(line.strip() for line in shown.splitlines() if line.strip().startswith(RUNTIME_PROPERTIES))
    jar_dirs = [Path(pyspark.__file__).parent / "jars", jvm.lib_dir() / "spark", jvm.lib_dir() / "localfs"]
    jars = sorted(j for d in jar_dirs for j in d.glob("*.jar"))
    listing = [f"{j}:{j.stat().st_size}:{j.stat().st_mtime_ns}" for j in jars]
    return hashlib.sha256(json.dumps([java, listing]).encode()).hexdigest()


def ensure(timeout: float = 600) -> bool:
    """Build the archive unless one for this fingerprint is there; True when it was (re)built."""
    path = archive_path()
    stamp = path.with_suffix(".stamp")
    want = fingerprint()
    if path.is_file() and stamp.is_file() and stamp.read_text().strip() == want:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    partial = path.with_name(f"{ARCHIVE_NAME}.{os.getpid()}.partial")
    # The driver JVM writes the archive as it exits, after the Python process that started it; it holds that
    # process's stdout and stderr until then, so `run` (reading both to their end) returns once it has written.
    child = subprocess.run(
        [sys.executable, "-m", "sharp_dagster.spark.class_archive_build", "--dump", str(partial)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if child.returncode != 0:
        raise RuntimeError(
            f"building the driver's class archive failed:\n{(child.stdout + child.stderr)[-3000:]}"
        )
    if not partial.is_file():
        raise RuntimeError(f"the driver exited without writing its class archive {partial}")
    partial.rename(path)
    stamp.write_text(want + "\n")
    return True


def _dump(target: str) -> None:
    """In a process of its own: a driver that writes what it loaded to `target` when it exits."""
    with tempfile.TemporaryDirectory(prefix="sharp_class_archive_") as tmp:
        os.environ["SHARP_DATA_DIR"] = tmp
        for var in ("SHARP_WAREHOUSE_DIR", "SHARP_LOG_DB_URL", "SHARP_SPARK_MASTER", "SHARP_SPARK_CONF"):
            os.environ.pop(var, None)
        # C1 alone: this JVM lives for one small workload, where the optimizing compiler costs more than it gives.
        dump = ["-XX:TieredStopAtLevel=1", f"-XX:ArchiveClassesAtExit={target}", *QUIET]
        options = driver_java_options(*dump, archive=False)
        spark = build_spark_session(**{"spark.driver.extraJavaOptions": options})
        _workload(spark, Path(tmp))
        spark.stop()


def _workload(spark, tmp: Path) -> None:
    """What a warehouse step does, at a tiny size, so that its classes are loaded (and archived)."""
    spark.sql("CREATE NAMESPACE IF NOT EXISTS archive")
    spark.sql("CREATE TABLE archive.t (id BIGINT, v STRING, dt STRING) USING iceberg PARTITIONED BY (dt)")
    spark.sql("INSERT INTO archive.t VALUES (1, 'a', '2024-01-01'), (2, 'b', '2024-01-01')")
    spark.range(3).selectExpr("id", "cast(id AS STRING) AS v", "'2024-01-01' AS dt").createOrReplaceTempView(
        "c"
    )
    spark.sql(
        "MERGE INTO archive.t t USING c ON t.id = c.id WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
    )
    spark.sql("DELETE FROM archive.t WHERE id = 0")
    spark.sql("SELECT dt, count(*), max_by(v, id) FROM archive.t GROUP BY dt").collect()
    spark.sql("SELECT * FROM archive.t.snapshots").collect()
    out = str(tmp / "p")
    spark.range(10).selectExpr("id", "to_json(named_struct('id', id)) AS j").write.parquet(out)
    spark.read.parquet(out).selectExpr("from_json(j, 'id BIGINT').id").collect()
    spark.sql("DROP TABLE archive.t PURGE")


def main(argv: list[str]) -> int:
    if argv[:1] == ["--dump"]:
        _dump(argv[1])
        return 0
    built = ensure()
    print(f"the Spark driver's class archive {'written' if built else 'is current'}: {archive_path()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
