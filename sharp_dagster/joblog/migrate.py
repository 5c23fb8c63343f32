"""Bringing the platform database to the newest schema: Alembic `upgrade head`, once per process per URL.

Several processes (Dagster run workers, sensors, the CLI) start at the same time against the same database, so
the upgrade is serialised where the database can do it (a PostgreSQL advisory lock, a MySQL named lock, SQLite's
write lock taken up front by `BEGIN IMMEDIATE`) and retried on "already exists" races everywhere else. The first
revision also creates only what is missing, so a half-made schema is completed rather than failing.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError, OperationalError, ProgrammingError

from sharp_dagster.db import DatabaseUnavailable, make_engine
from sharp_dagster.redact import scrub_text
from sharp_dagster.settings import redact_url

log = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
_LOCK_ID = 0x5348415250  # "SHARP": the PostgreSQL advisory lock key of schema upgrades
_RETRIES = 5

_done: set[str] = set()
_done_lock = threading.Lock()


def alembic_config() -> Config:
    """An Alembic Config pointing at this package's migrations (no ini file needed)."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    return config


def _secret_free(exc: BaseException, engine: Engine) -> str:
    """The driver's message with the password removed, in case a driver ever echoes the DSN."""
    message = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    first = message[0] if message else type(exc).__name__

    password = engine.url.password
    return scrub_text(first, extra_secrets=[str(password)] if password else ()) or first


def connect_or_raise(engine: Engine) -> Connection:
    """Open a connection, turning "cannot connect" into `DatabaseUnavailable` with a password-free URL."""
    try:
        return engine.connect()
    except (OperationalError, DBAPIError) as exc:
        url = redact_url(engine.url.render_as_string(hide_password=False))
        raise DatabaseUnavailable(
            f"cannot reach the job-log database {url}: {_secret_free(exc, engine)}"
        ) from None


def _lock(conn: Connection) -> None:
    dialect = conn.dialect.name
    if dialect == "sqlite":
        # Take the write lock before Alembic reads anything: a second process waits (busy timeout) and then
        # finds the schema at head, instead of racing on CREATE TABLE.
        conn.exec_driver_sql("BEGIN IMMEDIATE")
    elif dialect == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _LOCK_ID})
    elif dialect in ("mysql", "mariadb"):
        conn.execute(text("SELECT GET_LOCK('sharp_dagster_schema', 60)"))


def _unlock(conn: Connection) -> None:
    if conn.dialect.name in ("mysql", "mariadb"):
        conn.execute(text("SELECT RELEASE_LOCK('sharp_dagster_schema')"))


def _upgrade_once(engine: Engine) -> None:
    conn = connect_or_raise(engine)
    try:
        _lock(conn)
        config = alembic_config()
        config.attributes["connection"] = conn
        command.upgrade(config, "head")
        _unlock(conn)
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    finally:
        conn.close()


def _is_race(exc: BaseException) -> bool:
    message = str(getattr(exc, "orig", None) or exc).lower()
    return any(
        token in message
        for token in ("already exists", "duplicate", "database is locked", "deadlock", "unique constraint")
    )


def ensure_schema(engine_or_url: Engine | str | None = None) -> Engine:
    """Upgrade the database to the newest revision (once per process per URL) and return its engine.

    Raises `DatabaseUnavailable` (URL shown without its password) when the database cannot be reached.
    """
    engine = engine_or_url if isinstance(engine_or_url, Engine) else make_engine(engine_or_url)
    key = engine.url.render_as_string(hide_password=False)
    if key in _done:
        return engine
    with _done_lock:
        if key in _done:
            return engine
        for attempt in range(1, _RETRIES + 1):
            try:
                _upgrade_once(engine)
                break
            except DatabaseUnavailable:
                raise
            except (OperationalError, ProgrammingError, DBAPIError) as exc:
                if attempt == _RETRIES or not _is_race(exc):
                    raise
                log.info(
                    "schema upgrade of %s raced with another process (%s); retrying",
                    redact_url(key),
                    _secret_free(exc, engine),
                )
                time.sleep(random.uniform(0.05, 0.3) * attempt)
        _done.add(key)
    return engine


def forget_schema_cache() -> None:
    """Forget which URLs were upgraded in this process (tests that drop and recreate databases)."""
    with _done_lock:
        _done.clear()
