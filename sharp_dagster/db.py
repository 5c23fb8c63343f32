"""The platform's own database (job log, step log, data-quality results): one SQLAlchemy MetaData, one URL.

The URL comes from `SHARP_LOG_DB_URL` (default: a SQLite file under `data/`); MySQL/MariaDB and PostgreSQL work too.
Table definitions live next to the engine that owns them (`sharp_dagster.joblog.models`,
`sharp_dagster.dqc.store`) and all register on `metadata` below; the schema is created and migrated by Alembic
(`sharp_dagster/joblog/migrations`).
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from sqlalchemy import MetaData, create_engine, event
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import ArgumentError

from sharp_dagster.settings import Settings, redact_url

metadata = MetaData()

_ENGINES: dict[str, Engine] = {}


class DatabaseUnavailable(RuntimeError):
    """The job-log database cannot be reached; the message shows the URL without its password."""


class BadDatabaseUrl(ValueError):
    """The job-log database URL cannot be read as written; the message shows it without its secrets."""


def check_url(url: str, what: str = "SHARP_LOG_DB_URL") -> None:
    """Refuse a URL SQLAlchemy would misread in a way that exposes its password.

    SQLAlchemy ends the password at the first `@`: `user:p@ss@db` connects to host `ss@db`, and the driver's
    "unknown host" error then prints part of the password. Such a URL is refused before any connection.
    """

    try:
        parsed = make_url(url)
    # ValueError: e.g. a port that is not a number, from a raw ':' or '/' in the password.
    except (ArgumentError, ValueError):
        raise BadDatabaseUrl(
            f"{what} is not a database URL SQLAlchemy can read (percent-encode special characters of the "
            f"user name and password): {redact_url(url)}"
        ) from None
    if parsed.host and "@" in parsed.host:
        raise BadDatabaseUrl(
            f"{what}: the user name or password holds a raw '@'; percent-encode it as %40 "
            f"(URL: {redact_url(url)})"
        )


def connection_url(url: str) -> URL:
    """SQLAlchemy's reading of a database URL with its credentials in their place: a `?user=` / `?password=` query
    parameter (libpq's spelling) becomes the URL's user / password. The one reading of `SHARP_LOG_DB_URL`: the job
    log's engine and the Iceberg catalog (`spark/catalog.py`) connect with the same credentials.

    >>> u = connection_url("postgresql+psycopg://etl@db/log?password=s3cret&sslmode=require")
    >>> (u.username, u.password, dict(u.query))
    ('etl', 's3cret', {'sslmode': 'require'})
    """
    parsed = make_url(url)
    query = dict(parsed.query)
    user, password = query.pop("user", None), query.pop("password", None)

    def last(value):  # a parameter given twice comes back as a tuple: libpq takes the last
        return value[-1] if isinstance(value, tuple) else value

    return parsed.set(
        username=parsed.username or last(user), password=parsed.password or last(password), query=query
    )


def make_engine(url: str | None = None) -> Engine:
    """One pooled engine per URL per process. SQLite gets WAL and a busy timeout so processes can share it."""
    url = url or Settings.from_env().log_db_url
    engine = _ENGINES.get(url)
    if engine is not None:
        return engine
    check_url(url)
    if url.startswith("sqlite"):
        if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
            Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": 30})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn, _record):
            cur = dbapi_conn.cursor()
            try:
                cur.execute("PRAGMA busy_timeout=30000")
                set_wal(cur)
            finally:
                cur.close()

    else:
        engine = create_engine(connection_url(url), pool_pre_ping=True)
    _ENGINES[url] = engine
    return engine


def set_wal(cur: sqlite3.Cursor, patience_s: float = 30.0) -> None:
    """`PRAGMA journal_mode=WAL`, waiting out other processes that open the same new file at the same moment.

    Switching a new file to WAL answers "database is locked" at once while another connection holds its lock:
    SQLite does not call the busy handler there. Four processes opening one fresh file together (a backfill's
    first run workers on a new install; `joblog/test_migrate`'s concurrent first start, which failed so in a CI
    rehearsal) met it in 5 and 8 rounds of 40 with plain sqlite3 on this machine; none with this wait.
    """
    deadline = time.monotonic() + patience_s
    while True:
        try:
            cur.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def describe(url: str) -> str:
    return redact_url(url)
