"""Job log: job_log, step_log, job_claim, job_asset, job_success_span, alert_log.

Revision ID: 0001_job_log
Revises:
Create Date: 2024-01-01 00:00:00

The tables are spelled out here (not imported from `models.py`) so that this revision keeps meaning the same
schema when the models move on; a test compares the two. Each table and index is created only when missing, so a
database left half-made by a crashed or concurrent first start (SQLite DDL is not transactional under Alembic)
is completed instead of failing with "table already exists".
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001_job_log"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _tables() -> list[tuple[str, list, list[tuple[str, list[str], dict]]]]:
    """(table name, columns and constraints, [(index name, columns, dialect kwargs)])."""
    now = sa.func.current_timestamp()
    return [
        (
            "job_log",
            [
                sa.Column("job_id", sa.String(36), primary_key=True),
                sa.Column("job_name", sa.String(128), nullable=False),
                sa.Column("job_period", sa.Integer, nullable=False),
                sa.Column("job_schedule_id", sa.String(255), nullable=False),
                sa.Column("data_range_start", sa.String(1024), nullable=True),
                sa.Column("data_range_end", sa.String(1024), nullable=True),
                sa.Column("job_start_time", sa.DateTime, nullable=True),
                sa.Column("job_end_time", sa.DateTime, nullable=True),
                sa.Column("status", sa.String(32), nullable=False),
                sa.Column("create_time", sa.DateTime, nullable=False, server_default=now),
                sa.Column("last_update_time", sa.DateTime, nullable=False, server_default=now),
                sa.Column("incremental_type", sa.String(16), nullable=True),
                sa.Column("current_file", sa.String(1024), nullable=True),
                sa.Column("application_id", sa.String(64), nullable=True),
                sa.Column("project_name", sa.String(256), nullable=True),
                sa.Column("run_id", sa.String(64), nullable=True),
                sa.Column("partition_key", sa.String(64), nullable=True),
                sa.Column("heartbeat_time", sa.DateTime, nullable=True),
                sa.Column("attempt", sa.Integer, nullable=False, server_default="1"),
                sa.Column("error", sa.Text, nullable=True),
                sa.UniqueConstraint("job_schedule_id", "attempt", name="uq_job_log_schedule_attempt"),
            ],
            [
                (
                    "ix_job_log_name_start_status",
                    ["job_name", "data_range_start", "status"],
                    {"mysql_length": {"data_range_start": 255}},
                ),
                ("ix_job_log_name_created", ["job_name", "create_time"], {}),
                ("ix_job_log_created", ["create_time"], {}),
                ("ix_job_log_run_id", ["run_id"], {}),
            ],
        ),
        (
            "step_log",
            [
                sa.Column("job_id", sa.String(36), nullable=False),
                sa.Column("step_id", sa.String(64), nullable=False),
                sa.Column("status", sa.String(32), nullable=False),
                sa.Column("start_time", sa.DateTime, nullable=False),
                sa.Column("end_time", sa.DateTime, nullable=True),
                sa.Column("duration", sa.BigInteger, nullable=True),
                sa.Column("output", sa.Text, nullable=True),
                sa.Column("source_count", sa.BigInteger, nullable=True),
                sa.Column("target_count", sa.BigInteger, nullable=True),
                sa.Column("success_count", sa.BigInteger, nullable=True),
                sa.Column("failure_count", sa.BigInteger, nullable=True),
                sa.Column("error", sa.Text, nullable=True),
                sa.Column("source_type", sa.String(256), nullable=True),
                sa.Column("target_type", sa.String(256), nullable=True),
                sa.PrimaryKeyConstraint("job_id", "step_id", name="pk_step_log"),
            ],
            [],
        ),
        (
            "job_claim",
            [
                sa.Column("job_schedule_id", sa.String(255), primary_key=True),
                sa.Column("job_id", sa.String(36), nullable=False),
                sa.Column("run_id", sa.String(64), nullable=True),
                sa.Column("claimed_at", sa.DateTime, nullable=False),
                sa.Column("heartbeat_time", sa.DateTime, nullable=False),
            ],
            [],
        ),
        (
            "job_asset",
            [
                sa.Column("job_name", sa.String(128), primary_key=True),
                sa.Column("version", sa.BigInteger, nullable=False, server_default="0"),
                sa.Column("updated_at", sa.DateTime, nullable=True),
            ],
            [],
        ),
        (
            "job_success_span",
            [
                sa.Column("job_name", sa.String(128), nullable=False),
                sa.Column("span_start", sa.String(32), nullable=False),
                sa.Column("span_end", sa.String(32), nullable=False),
                sa.PrimaryKeyConstraint("job_name", "span_start", name="pk_job_success_span"),
            ],
            [],
        ),
        (
            "alert_log",
            [
                sa.Column("dedup_key", sa.String(255), primary_key=True),
                sa.Column("first_sent_at", sa.DateTime, nullable=True),
                sa.Column("last_seen_at", sa.DateTime, nullable=False),
                sa.Column("count", sa.Integer, nullable=False, server_default="0"),
                sa.Column("kind", sa.String(64), nullable=True),
                sa.Column("payload", sa.Text, nullable=True),
            ],
            [],
        ),
    ]


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    existing = set(inspector.get_table_names())
    for name, columns, indexes in _tables():
        if name not in existing:
            op.create_table(name, *columns)
            present: set[str] = set()
        else:
            present = {ix["name"] for ix in inspector.get_indexes(name)}
        for ix_name, ix_columns, kwargs in indexes:
            if ix_name not in present:
                op.create_index(ix_name, name, ix_columns, **kwargs)


def downgrade() -> None:
    for name, _columns, _indexes in reversed(_tables()):
        op.drop_table(name)
