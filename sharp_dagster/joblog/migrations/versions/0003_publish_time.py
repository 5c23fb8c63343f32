"""Fencing: job_log.publish_time, when an attempt passed the fencing-token check right before its table commit.

Revision ID: 0003_publish_time
Revises: 0002_dqc_result
Create Date: 2026-11-23 00:00:00

Like 0001 and 0002, the column is added only when missing, so a database left half-upgraded by a crashed or
concurrent start is completed instead of failing. A nullable column without default: an ALTER every database
(SQLite included) does in place.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003_publish_time"
down_revision: str | Sequence[str] | None = "0002_dqc_result"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "job_log"
COLUMN = "publish_time"


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    if COLUMN not in {c["name"] for c in inspector.get_columns(TABLE)}:
        op.add_column(TABLE, sa.Column(COLUMN, sa.DateTime, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table(TABLE) as batch:
        batch.drop_column(COLUMN)
