"""The raw binlog tables' names and the quarantine's columns: `original_binlog.<db>` (one row per row change,
partitioned by table, dt and hour) and `original_binlog.<db>_quarantine` (by dt).

Apart from `land.py` so that a reader of the raw tables (the ODS merge's `read` step, the done markers, the
quarantine alert) names them without loading the Kafka client.
"""

from __future__ import annotations

from sharp_dagster.cdc.change import binlog_schema as bs
from sharp_dagster.spark.tables import TableRef

RAW_DATABASE = "original_binlog"
QUARANTINE_COLUMNS: list[tuple[str, str]] = [
    ("reason", "string"),
    ("kafka_topic", "string"),
    ("kafka_partition", "int"),
    ("kafka_offset", "bigint"),
    ("kafka_timestamp_ms", "bigint"),
    ("raw_value", "binary"),
    ("quarantined_at_ms", "bigint"),
]


def raw_table_ref(database: str) -> TableRef:
    """The raw binlog table of a source database.

    >>> raw_table_ref("shop").qualified
    'original_binlog.shop'
    """
    return TableRef(RAW_DATABASE, database, bs.RAW_BINLOG_PARTITION_COLUMNS)


def quarantine_table_ref(database: str) -> TableRef:
    """The quarantine of a source database's binlog: the records that are not valid change messages.

    >>> quarantine_table_ref("shop").qualified
    'original_binlog.shop_quarantine'
    """
    return TableRef(RAW_DATABASE, f"{database}_quarantine", ("dt",))
