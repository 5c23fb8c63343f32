"""Shared fixtures: every test run works in its own temporary data folder, never in the repo's `data/`.

Under CI (the `CI` variable set) a skipped test fails the run: see ci_skips.py.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

# Under CI a skip fails the run (see ci_skips.py); the hooks count as this conftest's own.
from sharp_dagster_tests.ci_skips import pytest_make_collect_report, pytest_runtest_makereport  # noqa: F401

_RUN_DIR = Path(tempfile.mkdtemp(prefix="sharp_dagster_tests_"))
os.environ["SHARP_DATA_DIR"] = str(_RUN_DIR / "data")
os.environ["DAGSTER_HOME"] = str(_RUN_DIR / "dagster_home")
os.environ.pop("SHARP_WAREHOUSE_DIR", None)
os.environ.pop("SHARP_LOG_DB_URL", None)
os.environ.pop("SHARP_ALERT_WEBHOOK_URL", None)
(_RUN_DIR / "dagster_home").mkdir(parents=True, exist_ok=True)
# The JVMs the tests start (Spark drivers of subprocesses and Dagster run workers, a cluster's daemons and
# executors, HDFS) live for seconds to minutes on tiny data: HotSpot's C1 compiler alone. C2's compiles cost more
# CPU than they give back there (faults/test_race[sqlite] + logdriven/test_ods_source_day side by side in cgroups:
# 396 CPU-s with C2, 290 with C1 alone). The test process's own long-lived session keeps both tiers (`spark`
# below: its in-process work took as much CPU either way and 12 % longer on C1). A user's own value wins.
JVM_OPTIONS, C1_ONLY = "JDK_JAVA_OPTIONS", "-XX:TieredStopAtLevel=1"
os.environ.setdefault(JVM_OPTIONS, C1_ONLY)


@pytest.fixture(scope="session")
def run_dir() -> Path:
    return _RUN_DIR


@pytest.fixture(scope="session")
def spark():
    """The one local SparkSession of the test process (Spark allows one per JVM)."""
    from sharp_dagster.settings import Settings
    from sharp_dagster.spark.session import build_spark_session

    ours = os.environ.get(JVM_OPTIONS) == C1_ONLY
    if ours:  # both JIT tiers for this long-lived one (see JVM_OPTIONS above)
        del os.environ[JVM_OPTIONS]
    try:
        session = build_spark_session(Settings.from_env(), app_name="sharp_dagster_tests")
    finally:
        if ours:
            os.environ[JVM_OPTIONS] = C1_ONLY
    yield session


@pytest.fixture()
def table_store(spark, tmp_path):
    """The Iceberg tables of a fresh warehouse folder of its own (its catalog in a job-log SQLite file beside it),
    made the session's current catalog."""
    return fresh_tables(spark, tmp_path)


def fresh_tables(spark, folder: Path):
    """`IcebergTables` over `folder/warehouse`, the catalog in `folder/sharp_log.db`; the current catalog."""
    from types import SimpleNamespace

    from sharp_dagster.spark.iceberg import warehouse_tables

    warehouse = Path(folder) / "warehouse"
    warehouse.mkdir(parents=True, exist_ok=True)  # a deployed warehouse exists: `cdc land --warehouse` checks
    log_db_url = f"sqlite:///{Path(folder) / 'sharp_log.db'}"
    settings = SimpleNamespace(warehouse_dir=warehouse, log_db_url=log_db_url)
    return warehouse_tables(spark, settings)
