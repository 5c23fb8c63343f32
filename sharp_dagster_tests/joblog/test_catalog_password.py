"""The Iceberg catalog's JDBC password never enters Spark's configuration (which Spark prints at DEBUG level and
copies into the Hadoop conf): it goes into a private password file the PostgreSQL driver reads. The job log and the
catalog read `SHARP_LOG_DB_URL` the same way (`db.connection_url`), so `?password=` works for both.

The end-to-end test runs `sharp-dagster sql` at `SHARP_SPARK_LOG_LEVEL=DEBUG` in its own process against a private
PostgreSQL server where the catalog's role must give its password (scram), and greps everything the process printed
(what Dagster keeps as a run's compute log) for it.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from sharp_dagster.db import connection_url
from sharp_dagster.spark.catalog import catalog_conf, jdbc_catalog_props, password_file

PASSWORD = f"Pw{uuid.uuid4().hex[:10]}x"


class _Settings:
    def __init__(self, warehouse_dir: Path, log_db_url: str):
        self.warehouse_dir, self.log_db_url = warehouse_dir, log_db_url


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql+psycopg://etl:{PASSWORD}@db.internal:5433/log",
        f"postgresql+psycopg://etl@db.internal:5433/log?password={PASSWORD}&sslmode=require",
        f"postgresql+psycopg://db.internal:5433/log?user=etl&password={PASSWORD}",
    ],
    ids=["userinfo", "query_password", "query_user_and_password"],
)
def test_the_password_is_in_a_private_file_not_in_spark_conf(tmp_path, url):
    conf = catalog_conf(_Settings(tmp_path / "wh", url), catalog="c")
    assert not any(PASSWORD in v for v in conf.values()) and not any("password" in k for k in conf)
    assert conf["spark.sql.catalog.c.uri"] == "jdbc:postgresql://db.internal:5433/log"
    assert conf["spark.sql.catalog.c.jdbc.user"] == "etl"
    path = password_file()
    assert path is not None and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert f"db.internal:5433:log:etl:{PASSWORD}" in path.read_text().splitlines()
    # One reading of the URL: the job log's engine connects with the same user and password.
    parsed = connection_url(url)
    assert (parsed.username, parsed.password, parsed.host, parsed.port) == (
        "etl",
        PASSWORD,
        "db.internal",
        5433,
    )
    assert jdbc_catalog_props(url) == {"uri": "jdbc:postgresql://db.internal:5433/log", "jdbc.user": "etl"}


def test_the_running_drivers_resolve_the_password(spark, tmp_path):
    """PostgreSQL's JDBC driver in the session's JVM finds the password through the file (its pgpass reader)."""
    from sharp_dagster.spark.catalog import provide_password_file

    jdbc_catalog_props(f"postgresql+psycopg://etl:{PASSWORD}@db.example:6543/wh")
    provide_password_file(spark)
    parser = spark._jvm.org.postgresql.jdbcurlresolver.PgPassParser
    assert parser.getPassword("db.example", "6543", "wh", "etl") == PASSWORD


@pytest.mark.postgres
@pytest.mark.parametrize("form", ["userinfo", "query"])
def test_a_debug_level_run_prints_no_password_and_the_catalog_connects(pg_server, tmp_path, form):
    import psycopg

    db = pg_server.create_database()
    role = f"cat_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(host="127.0.0.1", port=pg_server.port, user="postgres", dbname="postgres") as conn:
        conn.autocommit = True
        conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{PASSWORD}'")
        conn.execute(f'GRANT ALL ON DATABASE "{db.rsplit("/", 1)[1]}" TO {role}')
        conn.execute(f'ALTER DATABASE "{db.rsplit("/", 1)[1]}" OWNER TO {role}')
        hba = Path(conn.execute("SHOW hba_file").fetchone()[0])
        # This role must prove its password; every other connection stays as the server was set up (trust).
        hba.write_text(f"host all {role} 127.0.0.1/32 scram-sha-256\n" + hba.read_text())
        conn.execute("SELECT pg_reload_conf()")
    if form == "userinfo":
        url = db.replace("postgres@", f"{role}:{PASSWORD}@")
    else:
        url = db.replace("postgres@", f"{role}@") + f"?password={PASSWORD}"
    env = {
        **os.environ,
        "SHARP_SPARK_LOG_LEVEL": "DEBUG",
        "SHARP_LOG_DB_URL": url,
        "SHARP_DATA_DIR": str(tmp_path),
    }
    env.pop("SHARP_WAREHOUSE_DIR", None)
    done = subprocess.run(
        [sys.executable, "-m", "sharp_dagster.cli", "sql", "show namespaces"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    printed = done.stdout + done.stderr
    assert "DEBUG" in printed, "the run really logged at DEBUG level"
    assert PASSWORD not in printed
    assert done.returncode == 0, printed[-3000:]  # the catalog connected as the role, with its password
