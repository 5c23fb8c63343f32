"""The binlog collector's resume position: cdc_collector_position.

Revision ID: 0004_cdc_collector_position
Revises: 0003_publish_time
Create Date: 2026-11-26 00:00:00

One row per CDC source (`source_id`): the binlog file and position after the last commit whose messages Kafka
acknowledged, the MariaDB GTID position, that commit's time, the server id and binlog epoch it was read under
(`sharp_dagster.cdc.change.binlog_schema`), and the fencing generation of the collector that
owns the row (`sharp_dagster.cdc.capture.collector_db`). Spelled out here, not imported from the model, so that this
revision keeps meaning the same schema; a test compares the two. Created only when missing, like 0001 and 0002.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004_cdc_collector_position"
down_revision: str | Sequence[str] | None = "0003_publish_time"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "cdc_collector_position"


def upgrade() -> None:
    if TABLE in set(sa.inspect(op.get_bind()).get_table_names()):
        return
    op.create_table(
        TABLE,
        sa.Column("source_id", sa.String(128), primary_key=True),
        sa.Column("generation", sa.Integer, nullable=False, server_default="0"),
        sa.Column("owner", sa.String(255), nullable=True),
        sa.Column("binlog_file", sa.String(255), nullable=True),
        sa.Column("binlog_pos", sa.BigInteger, nullable=True),
        sa.Column("gtid_pos", sa.String(1024), nullable=True),
        sa.Column("event_ts_ms", sa.BigInteger, nullable=True),
        sa.Column("saved_at", sa.DateTime, nullable=True),
        sa.Column("server_id", sa.BigInteger, nullable=True),
        sa.Column("binlog_epoch", sa.Integer, nullable=False, server_default="0"),
    )


def downgrade() -> None:
    op.drop_table(TABLE)
