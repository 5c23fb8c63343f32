"""Fixtures of the job-log tests: every test runs on SQLite and on a private PostgreSQL server it starts."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from sharp_dagster_tests.joblog.pgserver import PostgresServer, unavailable_reason


def pytest_configure(config):
    config.addinivalue_line("markers", "postgres: runs against a private PostgreSQL server the test starts")


@pytest.fixture(scope="session")
def pg_server():
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(f"PostgreSQL tests skipped: {reason}")
    server = PostgresServer().start()  # own dir under /tmp: pytest's tmp dirs are closed to the postgres user
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request, tmp_path):
    """A fresh, empty database of each kind."""
    from sharp_dagster.db import make_engine

    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'joblog.db'}"
    else:
        url = request.getfixturevalue("pg_server").create_database()
    yield url
    make_engine(url).dispose()


class FakeClock:
    """A settable naive-UTC clock for claim and heartbeat timing."""

    def __init__(self, start: datetime = datetime(2024, 6, 1, 12, 0, 0)):
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> datetime:
        self.now += timedelta(seconds=seconds)
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def job_log(db_url, clock):
    from sharp_dagster.joblog.store import JobLog

    return JobLog(db_url, clock=clock)
