"""The tables a collector follows: cdc_collector_position.follows.

Revision ID: 0005_collector_follows
Revises: 0004_cdc_collector_position
Create Date: 2026-11-28 00:00:00

The qualified names (`db.table`, the YAML's logical names) of the tables the collector that holds the row read
its source YAML with, as a JSON list, written when it takes the row at start and on every save
(`sharp_dagster.cdc.capture.collector_db`). `cdc bootstrap --table` reads it to refuse a table the running
collector does not capture yet. NULL for a row written before this revision (no collector restarted since).
Like 0003, added only when missing; a nullable column without default, which every database adds in place.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005_collector_follows"
down_revision: str | Sequence[str] | None = "0004_cdc_collector_position"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "cdc_collector_position"
COLUMN = "follows"


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    if COLUMN not in {c["name"] for c in inspector.get_columns(TABLE)}:
        op.add_column(TABLE, sa.Column(COLUMN, sa.Text, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table(TABLE) as batch:
        batch.drop_column(COLUMN)
