"""The Spark driver's class-data-sharing archive (`sharp_dagster/spark/class_archive.py`): the bootstrap writes it,
every driver starts from it, and a driver whose class path does not match it starts without it, quietly."""

from __future__ import annotations

import os
import subprocess
import sys

from sharp_dagster.spark import class_archive, class_archive_build

# A driver started like `build_spark_session` starts one, with `-Xshare:on`: the JVM refuses to start when it
# cannot map the archive, so "started" proves the driver's classes came from it.
DRIVER = """
import os, sys, tempfile
os.environ["SHARP_DATA_DIR"] = tempfile.mkdtemp()
from sharp_dagster.spark import class_archive
from sharp_dagster.spark.session import DEFAULT_DRIVER_JAVA_OPTIONS, build_spark_session
options = [*DEFAULT_DRIVER_JAVA_OPTIONS, *class_archive.driver_java_options(), *sys.argv[1:]]
spark = build_spark_session(**{"spark.driver.extraJavaOptions": " ".join(options)})
print("started", spark.range(5).count())
"""


def _driver(tmp_path, *java_options: str, **env: str) -> subprocess.CompletedProcess:
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    return subprocess.run(
        [sys.executable, str(script), *java_options],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "JDK_JAVA_OPTIONS": "", **env},
    )


def test_the_bootstrap_wrote_the_archive_for_this_machine():
    assert class_archive.archive_path().is_file(), (
        "run scripts/bootstrap.sh: it writes the driver's class archive"
    )
    assert class_archive_build.ensure() is False  # its fingerprint is this machine's: nothing to rebuild


def test_a_driver_maps_its_classes_from_the_archive_and_a_mismatch_is_quiet(tmp_path):
    on = _driver(tmp_path, "-Xshare:on")
    assert on.returncode == 0 and "started 5" in on.stdout, (on.stdout + on.stderr)[-3000:]
    # Another class path (a user's spark.driver.extraClassPath): the JVM cannot use the archive ...
    other = {"SHARP_SPARK_CONF": f"spark.driver.extraClassPath={tmp_path}"}
    refused = _driver(tmp_path, "-Xshare:on", **other)
    assert refused.returncode != 0 and "shared class paths mismatch" in refused.stdout + refused.stderr
    # ... and without -Xshare:on starts without it, with not one line about it on stdout (CLIs print JSON there).
    quiet = _driver(tmp_path, **other)
    assert quiet.returncode == 0 and quiet.stdout.strip() == "started 5", quiet.stdout[-2000:]


def test_no_archive_no_options(tmp_path, monkeypatch):
    monkeypatch.setenv("SHARP_JVM_LIB_DIR", str(tmp_path))
    assert class_archive.driver_java_options() == []
    (tmp_path / "cds").mkdir()
    (tmp_path / "cds" / class_archive.ARCHIVE_NAME).write_bytes(b"")
    path = tmp_path / "cds" / class_archive.ARCHIVE_NAME
    assert class_archive.driver_java_options()[0] == f"-XX:SharedArchiveFile={path}"
