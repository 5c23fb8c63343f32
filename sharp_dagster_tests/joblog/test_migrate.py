"""Schema migrations: idempotent upgrade, models = migration, concurrent first start, unreachable database."""

from __future__ import annotations

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text

from sharp_dagster.db import DatabaseUnavailable, make_engine, metadata
from sharp_dagster.joblog.migrate import alembic_config, ensure_schema, forget_schema_cache
from sharp_dagster.joblog.models import JOBLOG_TABLES
from sharp_dagster.joblog.store import JobLog
from sharp_dagster_tests.joblog import workers
from sharp_dagster_tests.joblog.pgserver import free_port

OURS = {t.name for t in JOBLOG_TABLES}
VERSION_TABLE = "sharp_dagster_alembic_version"


def _version(engine) -> str:
    with engine.connect() as conn:
        return conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar_one()


def test_first_revision_id_and_upgrade_is_idempotent(db_url):
    script = ScriptDirectory.from_config(alembic_config())
    assert script.get_revision("0001_job_log").down_revision is None
    engine = ensure_schema(db_url)
    assert OURS <= set(inspect(engine).get_table_names())
    head = script.get_current_head()
    assert _version(engine) == head
    # Again: cached in this process, then for real, then through Alembic's command directly.
    ensure_schema(db_url)
    forget_schema_cache()
    ensure_schema(db_url)
    config = alembic_config()
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, "head")
    assert _version(engine) == head


def test_models_and_migration_agree(db_url):
    engine = ensure_schema(db_url)

    def ours(obj, name, type_, reflected, compare_to):
        table = obj if type_ == "table" else getattr(obj, "table", None)
        return table is None or table.name in OURS

    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"include_object": ours, "compare_type": True})
        diff = compare_metadata(context, metadata)
    assert diff == []


def test_a_half_made_schema_is_completed(tmp_path):
    url = f"sqlite:///{tmp_path / 'half.db'}"
    engine = make_engine(url)
    with engine.begin() as conn:  # as if a first start crashed after one table
        conn.execute(
            text(
                "CREATE TABLE job_claim (job_schedule_id VARCHAR(255) PRIMARY KEY, job_id VARCHAR(36) NOT NULL, run_id VARCHAR(64), claimed_at DATETIME NOT NULL, heartbeat_time DATETIME NOT NULL)"
            )
        )
    ensure_schema(engine)
    assert OURS <= set(inspect(engine).get_table_names())
    assert "ix_job_log_name_start_status" in {ix["name"] for ix in inspect(engine).get_indexes("job_log")}
    engine.dispose()


def test_concurrent_first_start(db_url):
    ctx = workers.context()
    barrier = ctx.Barrier(4)
    results = ctx.Queue()
    procs = [ctx.Process(target=workers.upgrade_schema, args=(db_url, barrier, results)) for _ in range(4)]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=180) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert [o[0] for o in outcomes] == ["ok"] * 4, [o[2] for o in outcomes if o[0] != "ok"]
    engine = make_engine(db_url)
    assert _version(engine) == ScriptDirectory.from_config(alembic_config()).get_current_head()


def test_unreachable_database_hides_the_password():
    port = free_port()  # nothing listens there
    url = f"postgresql+psycopg://etl:S3cretPw@127.0.0.1:{port}/joblog"
    with pytest.raises(DatabaseUnavailable) as exc:
        ensure_schema(url)
    message = str(exc.value)
    assert "S3cretPw" not in message
    assert f"postgresql+psycopg://etl:***@127.0.0.1:{port}/joblog" in message
    with pytest.raises(DatabaseUnavailable) as exc:
        JobLog(url)
    assert "S3cretPw" not in str(exc.value)
    assert "S3cretPw" not in repr(exc.value) and exc.value.__cause__ is None
