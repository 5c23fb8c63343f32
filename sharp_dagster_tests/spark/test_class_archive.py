"""The Spark driver's class-data-sharing archive (`sharp_dagster/spark/class_archive.py`): the bootstrap writes it,
a driver starts from it, and a JVM whose class path does not match it starts without it, quietly."""

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
from sharp_dagster.spark.session import build_spark_session, driver_java_options
spark = build_spark_session(**{"spark.driver.extraJavaOptions": driver_java_options("-Xshare:on")})
print("started", spark.range(5).count())
"""


def test_the_bootstrap_wrote_the_archive_for_this_machine():
    assert class_archive.archive_path().is_file(), (
        "run scripts/bootstrap.sh: it writes the driver's class archive"
    )
    assert class_archive_build.ensure() is False  # its fingerprint is this machine's: nothing to rebuild


def test_a_driver_maps_its_classes_from_the_archive(tmp_path):
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    env = {**os.environ, "JDK_JAVA_OPTIONS": ""}
    on = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert on.returncode == 0 and "started 5" in on.stdout, (on.stdout + on.stderr)[-3000:]


def test_another_class_path_starts_without_it_and_says_nothing_on_stdout(tmp_path):
    """A user's own class path (spark.driver.extraClassPath): the JVM cannot use the archive. With -Xshare:on it
    refuses (so the class path is really another), with the driver's options it starts quietly (CLIs print JSON)."""
    java = ["java", "-cp", str(tmp_path), *class_archive.driver_java_options()]
    env = {**os.environ, "JDK_JAVA_OPTIONS": ""}
    refused = subprocess.run([*java, "-Xshare:on", "-version"], capture_output=True, text=True, env=env)
    assert refused.returncode != 0 and "shared class paths mismatch" in refused.stdout + refused.stderr
    quiet = subprocess.run([*java, "-version"], capture_output=True, text=True, env=env)
    assert quiet.returncode == 0 and quiet.stdout == "", quiet.stdout


def test_no_archive_no_options(tmp_path, monkeypatch):
    monkeypatch.setenv("SHARP_JVM_LIB_DIR", str(tmp_path))
    assert class_archive.driver_java_options() == []
    path = tmp_path / "cds" / class_archive.ARCHIVE_NAME
    path.parent.mkdir()
    path.write_bytes(b"")
    assert class_archive.driver_java_options()[0] == f"-XX:SharedArchiveFile={path}"
