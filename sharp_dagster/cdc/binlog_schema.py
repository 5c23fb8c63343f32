"""The raw binlog row: one row per row change, as the hourly landing writes it and the daily merge reads it.

This is seed 002's `original_binlog.<db>` table. The binlog identity (file sequence, position, row index) orders
changes; `binlog_seq` packs it into one sortable decimal(38,0): file_seq * 10^18 + pos * 10^6 + row_idx.
`event_uid` hashes the identity (source, file, position, row index) and is the de-duplication key.
"""

from __future__ import annotations

import hashlib
import re

OPS = ("c", "u", "d", "r", "t", "ddl")

# (name, Spark SQL type). Partition columns of the raw table come after these: table_name, dt, hour.
RAW_BINLOG_COLUMNS: list[tuple[str, str]] = [
    ("source_id", "string"),
    ("binlog_file", "string"),
    ("binlog_file_seq", "bigint"),
    ("binlog_pos", "bigint"),
    ("row_idx", "int"),
    ("binlog_seq", "decimal(38,0)"),
    ("gtid", "string"),
    ("event_uid", "string"),
    ("event_ts_ms", "bigint"),
    ("op", "string"),
    ("source_db", "string"),
    ("source_table", "string"),
    ("pk_names", "array<string>"),
    ("before_json", "string"),
    ("after_json", "string"),
    ("ddl_sql", "string"),
    ("kafka_topic", "string"),
    ("kafka_partition", "int"),
    ("kafka_offset", "bigint"),
    ("ingest_ts_ms", "bigint"),
]
RAW_BINLOG_PARTITION_COLUMNS = ("table_name", "dt", "hour")

POS_FACTOR = 10**6
FILE_FACTOR = 10**18
MAX_POS = 10**12 - 1
MAX_ROW_IDX = 10**6 - 1

_FILE_SEQ = re.compile(r"\.(\d+)$")


def raw_binlog_ddl_schema() -> str:
    """The data columns as a Spark DDL schema string (for `spark.createDataFrame(rows, schema)`)."""
    return ", ".join(f"{name} {typ}" for name, typ in RAW_BINLOG_COLUMNS)


def binlog_file_seq(binlog_file: str) -> int:
    """The numeric suffix of a binlog file name, compared as a number: `mysql-bin.1000000` > `mysql-bin.999999`.

    >>> binlog_file_seq("mysql-bin.000012")
    12
    """
    match = _FILE_SEQ.search(binlog_file or "")
    if not match:
        raise ValueError(f"binlog file name has no numeric suffix: {binlog_file!r}")
    return int(match.group(1))


def binlog_seq(file_seq: int, pos: int, row_idx: int) -> int:
    """One sortable number for a row change; fits decimal(38,0).

    >>> binlog_seq(3, 1234, 2)
    3000000001234000002
    """
    if not 0 <= pos <= MAX_POS:
        raise ValueError(f"binlog position out of range: {pos}")
    if not 0 <= row_idx <= MAX_ROW_IDX:
        raise ValueError(f"row index out of range: {row_idx}")
    return file_seq * FILE_FACTOR + pos * POS_FACTOR + row_idx


def event_uid(source_id: str, binlog_file: str, pos: int, row_idx: int) -> str:
    """The de-duplication key of a row change: a hash of its binlog identity."""
    raw = f"{source_id}|{binlog_file}|{pos}|{row_idx}".encode()
    return hashlib.sha1(raw).hexdigest()
