"""Alembic environment of the platform database (job log, step log, claims, alerts, data-quality results).

Run programmatically by `sharp_dagster.joblog.migrate.ensure_schema`, which passes an open connection through
`config.attributes["connection"]`. Run from the command line (`alembic -c <ini>`), it falls back to
`sqlalchemy.url` of the ini file, else `SHARP_LOG_DB_URL` / the default SQLite file.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

import sharp_dagster.joblog.models  # noqa: F401  (registers the job-log tables on the metadata)
from sharp_dagster.db import metadata
from sharp_dagster.settings import Settings

# Own version table: the platform DB may be shared with Dagster's storage, which has its own `alembic_version`.
VERSION_TABLE = "sharp_dagster_alembic_version"

config = context.config


def _configure(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        version_table=VERSION_TABLE,
        # SQLite can only ALTER through table copies; batch mode does that for later migrations.
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure(connection)
        with context.begin_transaction():
            context.run_migrations()
        return
    url = config.get_main_option("sqlalchemy.url") or Settings.from_env().log_db_url
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            _configure(conn)
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


def run_migrations_offline() -> None:
    url = config.get_main_option("sqlalchemy.url") or Settings.from_env().log_db_url
    context.configure(url=url, target_metadata=metadata, version_table=VERSION_TABLE, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
