"""Data-quality results: dqc_result.

Revision ID: 0002_dqc_result
Revises: 0001_job_log
Create Date: 2024-01-02 00:00:00

Spelled out here (not imported from `sharp_dagster.dqc.store`) so that this revision keeps meaning the same
schema when the model moves on; a test compares the two. Like 0001, the table and its index are created only when
missing, so a database left half-made by a crashed or concurrent first start is completed instead of failing.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002_dqc_result"
down_revision: str | Sequence[str] | None = "0001_job_log"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "dqc_result"
INDEX = "ix_dqc_result_asset_rule_partition"


def _columns() -> list[sa.Column]:
    return [
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.String(64), nullable=True),
        sa.Column("asset", sa.String(255), nullable=False),
        sa.Column("partition", sa.String(64), nullable=False),
        sa.Column("rule_id", sa.String(128), nullable=False),
        sa.Column("rule_version", sa.String(32), nullable=False),
        sa.Column("template", sa.String(64), nullable=True),
        sa.Column("dimension", sa.String(32), nullable=False),
        sa.Column("severity", sa.String(16), nullable=False),
        sa.Column("comparator", sa.String(16), nullable=False),
        sa.Column("actual", sa.Double, nullable=True),
        sa.Column("expected", sa.Double, nullable=True),
        sa.Column("lower_bound", sa.Double, nullable=True),
        sa.Column("upper_bound", sa.Double, nullable=True),
        sa.Column("passed", sa.Boolean, nullable=False),
        sa.Column("downgraded", sa.Boolean, nullable=False),
        sa.Column("message", sa.Text, nullable=True),
        sa.Column("failing_keys", sa.Text, nullable=True),
        sa.Column("evaluated_at", sa.DateTime, nullable=False),
        sa.Column("elapsed_ms", sa.Double, nullable=True),
    ]


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    if TABLE not in set(inspector.get_table_names()):
        op.create_table(TABLE, *_columns())
        present: set[str] = set()
    else:
        present = {ix["name"] for ix in inspector.get_indexes(TABLE)}
    if INDEX not in present:
        op.create_index(INDEX, TABLE, ["asset", "rule_id", "partition"])


def downgrade() -> None:
    op.drop_index(INDEX, table_name=TABLE)
    op.drop_table(TABLE)
