"""The platform's database as the commands open it: every way that fails becomes one CliError line.

A URL SQLAlchemy cannot read, a driver that is not installed or rejects an option, a server that does not
answer: each is refused before the command changes anything, naming the URL without its secrets. A SQLite file
whose folder does not exist is refused too (a typo in `SHARP_LOG_DB_URL` must not create folders anywhere), and a
SQLite file that does not exist when a command reads the job log.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from sharp_dagster.cli.main import CliError
from sharp_dagster.settings import Settings, redact_url

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from sharp_dagster.joblog.store import JobLog


def log_db_url(override: str | None = None) -> str:

    return override or Settings.from_env().log_db_url


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}".rstrip(": ")


def check_log_db_url(url: str, must_exist: bool = False) -> None:
    """Refuse a URL before any engine is built (and before make_engine creates a SQLite file's folder). With
    `must_exist`, a SQLite file that is not there is refused too: a command that reads the job log (or changes what
    it holds) must not create an empty one where a typo points."""
    from sharp_dagster.db import BadDatabaseUrl, check_url

    try:
        check_url(url)
    except BadDatabaseUrl as exc:
        raise CliError(str(exc)) from None
    if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        folder = Path(url.removeprefix("sqlite:///").split("?", 1)[0]).parent
        if not folder.is_dir():
            raise CliError(f"SHARP_LOG_DB_URL: the folder of the SQLite job log does not exist: {folder}")
        path = Path(url.removeprefix("sqlite:///").split("?", 1)[0])
        if must_exist and not path.is_file():
            raise CliError(
                f"no job-log database at {path} (SHARP_LOG_DB_URL): nothing has run against it yet"
            )


def _engine(url: str) -> Engine:
    """`make_engine`, with SQLAlchemy's warnings about the URL as errors: a driver that ignores an option it does
    not know (pysqlite's `?bogus=1`) would otherwise run with a setting the operator did not get."""

    from sqlalchemy.exc import SAWarning

    from sharp_dagster.db import make_engine

    with warnings.catch_warnings():
        warnings.simplefilter("error", SAWarning)
        return make_engine(url)


def open_engine(url: str, what: str = "job-log database") -> Engine:
    """A connected engine for `url` (one connection is tried, so a server that is down is said now)."""

    check_log_db_url(url, must_exist=True)
    try:
        engine = _engine(url)
        with engine.connect():
            pass
    except Exception as exc:  # noqa: BLE001 - a driver may raise anything for an option it rejects
        raise CliError(f"cannot open the {what} {redact_url(url)}: {_first_line(exc)}") from None
    return engine


def open_job_log(url: str | None = None, prefix: str = "") -> JobLog:
    """The job log at `url` (default SHARP_LOG_DB_URL), its schema migrated; CliError when it cannot be opened."""
    from sharp_dagster.db import BadDatabaseUrl, DatabaseUnavailable
    from sharp_dagster.joblog.store import JobLog

    url = log_db_url(url)
    try:
        check_log_db_url(url, must_exist=True)
        return JobLog(_engine(url))
    except CliError as exc:
        raise CliError(f"{prefix}{exc}") from None
    except (BadDatabaseUrl, DatabaseUnavailable) as exc:
        raise CliError(f"{prefix}{exc}") from None
    except Exception as exc:  # noqa: BLE001 - a driver may raise anything for an option it rejects
        raise CliError(
            f"{prefix}cannot open the job-log database {redact_url(url)}: {_first_line(exc)}"
        ) from None
