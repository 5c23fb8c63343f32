"""The raw binlog row: one row per row change, as the hourly landing writes it and the daily merge reads it.

This is the binlog CDC design's raw table, `original_binlog.<db>`. The binlog identity (file sequence,
position, row index) orders changes; `binlog_seq` packs it into one sortable decimal(38,0):
file_seq * 10^18 + pos * 10^6 + row_idx.
`event_uid` hashes the identity (source, file, position, row index) and is the de-duplication key.

Binlog epochs: file names and positions belong to one server. When the collector resumes by GTID on another
server (a failover to a replica), what it reads there sorts after everything read before only if its positions
are told apart: the collector then counts a binlog epoch up, and `epoch_file_seq` puts it above the file number
(`epoch * 10^12 + file number`), which the merge orders by; the epoch is part of `event_uid` too (from epoch 1 on:
the identities of epoch 0 stay as they were), since two servers' binlogs reuse the same names and positions.
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
EPOCH_FACTOR = 10**12  # a binlog epoch is counted above the file number: file numbers stay below 10^12
MAX_EPOCH = 9_000_000  # binlog_file_seq is a bigint
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


def event_uid(source_id: str, binlog_file: str, pos: int, row_idx: int, epoch: int = 0) -> str:
    """The de-duplication key of a row change: a hash of its binlog identity (and its binlog epoch, from 1 on)."""
    raw = f"{source_id}|{binlog_file}|{pos}|{row_idx}" + (f"|{epoch}" if epoch else "")
    return hashlib.sha1(raw.encode()).hexdigest()


def epoch_file_seq(file_seq: int, epoch: int) -> int:
    """The file sequence number that orders a binlog epoch's files after every earlier epoch's.

    >>> epoch_file_seq(3, 0), epoch_file_seq(1, 1)
    (3, 1000000000001)
    """
    if not 0 <= epoch <= MAX_EPOCH:
        raise ValueError(f"binlog epoch out of range: {epoch}")
    if epoch and file_seq >= EPOCH_FACTOR:
        raise ValueError(f"binlog file sequence number {file_seq} too large for epoch {epoch}")
    return epoch * EPOCH_FACTOR + file_seq
