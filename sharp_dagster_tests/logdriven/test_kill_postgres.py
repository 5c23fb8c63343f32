"""The SIGKILL / takeover scenario with the job log on a real PostgreSQL server started by the test."""

from __future__ import annotations

import pytest

from sharp_dagster.demo.generator import generate
from sharp_dagster_tests.joblog.pgserver import PostgresServer, unavailable_reason
from sharp_dagster_tests.logdriven.conftest import SMALL
from sharp_dagster_tests.logdriven.kill_support import kill_then_takeover


@pytest.fixture(scope="module")
def isolated(tmp_path_factory):
    """A fresh data folder whose job log lives in a private PostgreSQL database (stopped by pid at the end)."""
    reason = unavailable_reason()
    if reason:
        pytest.skip(f"PostgreSQL unavailable: {reason}")
    server = PostgresServer().start()  # its own temp folder, readable by the postgres user
    mp = pytest.MonkeyPatch()
    try:
        root = tmp_path_factory.mktemp("logdriven_pg")
        mp.setenv("SHARP_DATA_DIR", str(root))
        mp.setenv("SHARP_LOG_DB_URL", server.create_database())
        mp.setenv("SHARP_CLAIM_TIMEOUT_S", "120")
        from sharp_dagster.settings import Settings

        generate(Settings.from_env().sample_dir, SMALL)
        yield root
    finally:
        mp.undo()
        server.stop()


def test_sigkill_mid_write_then_takeover_on_postgresql(feed, spark, tmp_path, monkeypatch):
    kill_then_takeover(feed, spark, tmp_path, monkeypatch)
