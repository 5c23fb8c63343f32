"""The servers of this directory's tests, one of each for all of them: a real HDFS (NameNode + DataNode on
loopback) and a private PostgreSQL server (the job log tests' fixture)."""

from __future__ import annotations

import pytest

from sharp_dagster_tests.joblog.conftest import pg_server  # noqa: F401 - the session's PostgreSQL server


@pytest.fixture(scope="session")
def hdfs():
    from sharp_dagster.servers.hdfs import LocalHdfs

    with LocalHdfs() as server:
        yield server
