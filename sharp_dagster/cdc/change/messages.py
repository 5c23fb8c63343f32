"""The Kafka message of one row change: Canal's flat JSON plus the binlog identity, and its parsing into a raw row.

Canal's flat message (`id, database, table, pkNames, isDdl, type, es, ts, sql, sqlType, mysqlType, data, old,
gtid`) has no binlog file, position or row index, so replays cannot be told from new changes. Each message here
carries ONE row change (`data` holds one row) and these extra fields:

- `sourceId`: the configured source id; `serverId`: the server id in the event header;
- `binlogFile`, `binlogPos`, `rowIdx`: the identity. `binlogPos` is the START position of the rows (or query)
  event, not the header's `log_pos` (which points at the next event), and `rowIdx` is the row's index inside
  that event, so a replayed change gets the same identity;
- `binlogEpoch` (absent for 0): counted up by the collector each time it resumes, by GTID, on another server
  than the one its position came from (a failover); it orders that server's positions after all earlier ones
  and is part of the identity (`binlog_schema.epoch_file_seq`, `event_uid`);
- `gtid`: the transaction's own GTID (`0-1-42` on MariaDB), not Canal's executed set;
- `commitTs`: the time (ms, whole seconds) of the commit event that ended the row's transaction (the XID event, or
  the COMMIT query / the statement itself for non-transactional tables and DDL). `es` stays Canal's statement time;
  a change belongs to the day and hour of its commit (`dt`/`hour` of the raw row), because only at its commit
  does it exist for any reader of the source. The collector holds a transaction's messages until its commit
  event and sends them all then, so every row change carries it. A message without `commitTs` (plain Canal, or
  a collector older than this field) is placed by `es` instead;
- `before`: for UPDATE, the full before image. `data` is the after image and `old` the changed columns' old
  values, as in Canal; `before` makes an update that changes the primary key visible (the merge deletes the old
  key). A message without `before` (plain Canal) gets `before = data + old`, exact under a FULL row image.

Values are strings (or JSON null for SQL NULL), as in Canal, in the canonical form of `canonical_values.py`. A
column absent from a row image was not logged (MINIMAL row image), which is not the same as null.

Besides row changes, DDL (`isDdl`, type ALTER/CREATE/ERASE/RENAME/CINDEX/DINDEX) and TRUNCATE are messages of
their own, and the collector sends `type: HEARTBEAT` messages (no table) to every partition: "everything up to
event time `es` has been sent". The landing uses them for its watermark; they are never landed as rows.

`parse_message` turns a Kafka record into the raw binlog row of `binlog_schema`, a `Heartbeat`, or a
`Quarantined` record (bad JSON, no identity, unknown type, unknown table, bad values, a message for a database the
topic does not carry): nothing is dropped silently. It is total: whatever the bytes, it returns one of the three and
never raises (a parser fault becomes a quarantine verdict naming it), so one bad record cannot stall a topic at its
offset. A row it returns is also safe to write: every value fits its raw-table column (event time within the years
0001-9999, `binlog_seq` within decimal(38,0), text encodable as UTF-8).
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from sharp_dagster.cdc.change import binlog_schema as bs
from sharp_dagster.cdc.source.shards import ShardRules

ROW_TYPES = {"INSERT": "c", "UPDATE": "u", "DELETE": "d"}
DDL_TYPES = ("CREATE", "ALTER", "ERASE", "RENAME", "CINDEX", "DINDEX", "QUERY")
TRUNCATE = "TRUNCATE"
HEARTBEAT = "HEARTBEAT"
KNOWN_TYPES = frozenset([*ROW_TYPES, *DDL_TYPES, TRUNCATE, HEARTBEAT])
# `es` must give a datetime (and a dt/hour partition): below 10000-01-01T00:00:00Z.
MAX_ES_MS = 253_402_300_800_000 - 1
# binlog_seq = file_seq * 10^18 + ...: a decimal(38,0) holds file sequence numbers below 10^20.
MAX_FILE_SEQ = 10**20 - 1
MAX_REASON_CHARS = 500

RawBinlogRow = dict[str, Any]
# Besides the raw table's columns a parsed row carries its commit time, which places it (dt, hour) and moves the
# landing's watermark; the raw table keeps the statement time (`event_ts_ms`) and, through dt/hour, the commit's.
PARSED_ONLY_KEYS = ("commit_ts_ms",)
RAW_ROW_KEYS = tuple(
    [name for name, _ in bs.RAW_BINLOG_COLUMNS]
    + list(bs.RAW_BINLOG_PARTITION_COLUMNS)
    + list(PARSED_ONLY_KEYS)
)


# ---------------------------------------------------------------------------------------------------- messages
@dataclass
class BinlogMessage:
    """One row change (or one DDL / TRUNCATE statement, or a heartbeat) as the collector sends it."""

    type: str
    source_id: str
    database: str
    table: str
    event_ts_ms: (
        int  # Canal's `es`, epoch ms: a change's binlog header (statement) time, a heartbeat's progress
    )
    binlog_file: str
    binlog_pos: int
    row_idx: int = 0
    gtid: str | None = None
    server_id: int | None = None
    pk_names: list[str] = field(default_factory=list)
    data: dict[str, str | None] | None = None
    old: dict[str, str | None] | None = None
    before: dict[str, str | None] | None = None
    sql: str = ""
    mysql_type: dict[str, str] | None = None
    sql_type: dict[str, int] | None = None
    ts: int | None = None
    id: int = 0
    commit_ts: int | None = None  # set by the collector at the transaction's commit event
    binlog_epoch: int = 0

    @property
    def is_ddl(self) -> bool:
        return self.type in DDL_TYPES

    def to_flat(self) -> dict[str, Any]:
        """Canal's flat JSON form plus the identity fields (`data`/`old`/`before` are one-element lists)."""
        return {
            "id": self.id,
            "database": self.database,
            "table": self.table,
            "pkNames": list(self.pk_names) or None,
            "isDdl": self.is_ddl,
            "type": self.type,
            "es": self.event_ts_ms,
            "ts": self.ts if self.ts is not None else int(time.time() * 1000),
            "sql": self.sql,
            "sqlType": self.sql_type,
            "mysqlType": self.mysql_type,
            "data": [self.data] if self.data is not None else None,
            "old": [self.old] if self.old is not None else None,
            "before": [self.before] if self.before is not None else None,
            "gtid": self.gtid,
            "sourceId": self.source_id,
            "serverId": self.server_id,
            "binlogFile": self.binlog_file,
            "binlogPos": self.binlog_pos,
            "rowIdx": self.row_idx,
            **({"binlogEpoch": self.binlog_epoch} if self.binlog_epoch else {}),
            **({"commitTs": self.commit_ts} if self.commit_ts is not None else {}),
        }


def encode(message: BinlogMessage) -> bytes:
    """The Kafka value: compact UTF-8 JSON."""
    return json.dumps(message.to_flat(), separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def with_commit_ts(value: bytes, commit_ts_ms: int) -> bytes:
    """An encoded message without `commitTs` given one, as its last field (what `encode` would have written).

    The collector encodes a transaction's messages as they are read and learns their commit time only at the
    commit event: appending the field to the JSON object spares decoding and encoding each message twice.

    >>> with_commit_ts(b'{"type":"INSERT"}', 1000)
    b'{"type":"INSERT","commitTs":1000}'
    """
    if not value.endswith(b"}") or b'"commitTs"' in value:
        raise ValueError("not an encoded message without commitTs")
    return value[:-1] + b',"commitTs":%d}' % commit_ts_ms


def update_old_values(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """Canal's `old`: the before values of the columns whose value changed."""
    return {k: v for k, v in before.items() if k in after and after[k] != v}


# ---------------------------------------------------------------------------------------------------- parsing
@dataclass(frozen=True)
class Quarantined:
    """A Kafka record that is not a valid change message, kept with the reason."""

    reason: str
    value: bytes
    topic: str
    partition: int
    offset: int
    timestamp_ms: int | None = None


@dataclass(frozen=True)
class Heartbeat:
    """The collector's progress mark: everything up to event time `es_ms` has been sent to this partition."""

    source_id: str
    database: str
    es_ms: int
    topic: str
    partition: int
    offset: int
    binlog_file: str | None = None
    binlog_pos: int | None = None


class _Bad(Exception):
    pass


def parse_message(
    value: bytes | None,
    topic: str,
    partition: int,
    offset: int,
    shard_rules: ShardRules,
    ingest_ts_ms: int | None = None,
    timestamp_ms: int | None = None,
    expected_database: str | None = None,
) -> RawBinlogRow | Heartbeat | Quarantined:
    """Parse one Kafka record; `timestamp_ms` (the record's timestamp) is kept on quarantined records only.

    `expected_database` is the source database the topic carries: a message (heartbeats included) naming another
    one is quarantined. Never raises: anything that cannot be taken is a `Quarantined` with the reason, and the
    caller moves past its offset.
    """
    raw = b""
    try:
        raw = bytes(value) if value is not None else b""
        return _parse(raw, topic, partition, offset, shard_rules, ingest_ts_ms, expected_database)
    except _Bad as bad:
        reason = str(bad)
    except Exception as exc:  # noqa: BLE001 - totality: a parser fault must not stall the topic at this offset
        # RecursionError (deep nesting), MemoryError, or a bug: quarantined with its name, never re-raised.
        reason = f"parser error: {type(exc).__name__}: {exc}"
    return Quarantined(_printable(reason), raw, topic, partition, offset, timestamp_ms)


def _printable(reason: str) -> str:
    """A reason safe to store: bounded, and UTF-8 encodable (a message can smuggle lone surrogates into it)."""
    reason = reason if len(reason) <= MAX_REASON_CHARS else reason[: MAX_REASON_CHARS - 3] + "..."
    return reason.encode("utf-8", "backslashreplace").decode("utf-8")


def _parse(
    raw: bytes,
    topic: str,
    partition: int,
    offset: int,
    rules: ShardRules,
    ingest_ts_ms: int | None,
    expected_database: str | None,
):
    """The checks in the order their reasons are reported: the envelope, a heartbeat's end, the identity, the
    table, the images; then the raw row."""
    msg = _decode(raw)
    kind, source_id, es, commit_ts, database = _envelope(msg, topic, expected_database)
    if kind == HEARTBEAT:
        pos = msg.get("binlogPos")
        return Heartbeat(
            source_id,
            str(database or ""),
            es,
            topic,
            partition,
            offset,
            msg.get("binlogFile"),
            pos if isinstance(pos, int) else None,
        )
    identity = _identity(msg)
    if not isinstance(database, str) or not database:
        raise _Bad("no database")
    table = msg.get("table")
    if not isinstance(table, str) or not table:
        raise _Bad("no table")
    logical = rules.fold(table)
    if logical is None:
        raise _Bad(f"unknown table {database}.{table}: no configured table or shard rule matches it")
    op, before, after, ddl_sql = _images(msg, kind)
    pk_names = msg.get("pkNames") or []
    if not isinstance(pk_names, list) or not all(isinstance(c, str) for c in pk_names):
        raise _Bad(f"pkNames is not a list of column names: {_short(pk_names)}")
    gtid = msg.get("gtid")
    when = dt.datetime.fromtimestamp(commit_ts / 1000, tz=dt.UTC)
    row = {
        "source_id": source_id,
        "binlog_file": identity.binlog_file,
        "binlog_file_seq": identity.file_seq,
        "binlog_pos": identity.pos,
        "row_idx": identity.row_idx,
        "binlog_seq": Decimal(identity.seq),
        "gtid": gtid if isinstance(gtid, str) else None,
        "event_uid": bs.event_uid(
            source_id, identity.binlog_file, identity.pos, identity.row_idx, identity.epoch
        ),
        "event_ts_ms": es,
        "commit_ts_ms": commit_ts,
        "op": op,
        "source_db": database,
        "source_table": table,
        "pk_names": list(pk_names),
        "before_json": _dumps(before),
        "after_json": _dumps(after),
        "ddl_sql": ddl_sql,
        "kafka_topic": topic,
        "kafka_partition": partition,
        "kafka_offset": offset,
        "ingest_ts_ms": ingest_ts_ms if ingest_ts_ms is not None else int(time.time() * 1000),
        "table_name": logical,
        "dt": when.strftime("%Y-%m-%d"),
        "hour": when.strftime("%H"),
    }
    for name, v in row.items():
        if not all(_utf8(t) for t in (v if isinstance(v, list) else [v]) if isinstance(t, str)):
            # JSON's \ud800 escapes decode to lone surrogates, which no UTF-8 writer takes: the write would fail.
            raise _Bad(f"bad text: {name} holds a lone surrogate, not encodable as UTF-8")
    return row


def _decode(raw: bytes) -> dict[str, Any]:
    """The message's JSON object."""
    if not raw:
        raise _Bad("empty message")
    try:
        msg = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise _Bad(f"not JSON: {str(exc)[:200]}") from None
    except RecursionError:
        # The stdlib decoder recurses once per nesting level; a message nested thousands deep is not a change.
        raise _Bad("not JSON: nested too deeply to decode") from None
    if not isinstance(msg, dict):
        raise _Bad(f"not a JSON object but a {type(msg).__name__}")
    return msg


def _envelope(
    msg: Mapping[str, Any], topic: str, expected_database: str | None
) -> tuple[str, str, int, int, Any]:
    """What every message, heartbeats included, carries: (type, sourceId, es, commit time, database)."""
    kind = msg.get("type")
    # Checked as a string first: a list or an object is unhashable and would raise in the set lookup.
    if not isinstance(kind, str) or kind not in KNOWN_TYPES:
        raise _Bad(f"unknown type {_short(kind)}")
    source_id = msg.get("sourceId")
    if not isinstance(source_id, str) or not source_id:
        raise _Bad("no binlog identity: sourceId missing")
    es = msg.get("es")
    if isinstance(es, bool) or not isinstance(es, int) or es < 0:
        raise _Bad(f"no event time: es is {_short(es)}")
    if es > MAX_ES_MS:
        raise _Bad(f"bad event time: es {_short(es)} is beyond the year 9999")
    commit_ts = _whole(msg, "commitTs", es, MAX_ES_MS, "bad commit time")  # absent: the statement time
    database = msg.get("database")
    if expected_database is not None and database != expected_database:
        raise _Bad(
            f"wrong database: the message is for {_short(database)}, topic {topic} carries {expected_database!r}"
        )
    return kind, source_id, es, commit_ts, database


@dataclass(frozen=True)
class _Identity:
    """Where a change stands in the binlog: its file, position, row index and epoch, and the sequence numbers
    they give (`binlog_schema`)."""

    binlog_file: str
    file_seq: int
    pos: int
    row_idx: int
    epoch: int
    seq: int


def _identity(msg: Mapping[str, Any]) -> _Identity:
    """The binlog identity of a row change or DDL (`binlogFile`, `binlogPos`, `rowIdx`, `binlogEpoch`)."""
    binlog_file = msg.get("binlogFile")
    pos = msg.get("binlogPos")
    row_idx = msg.get("rowIdx")
    missing = [
        name
        for name, ok in (
            ("binlogFile", isinstance(binlog_file, str) and binlog_file),
            ("binlogPos", isinstance(pos, int) and not isinstance(pos, bool)),
            ("rowIdx", isinstance(row_idx, int) and not isinstance(row_idx, bool)),
        )
        if not ok
    ]
    if missing:
        raise _Bad(f"no binlog identity: {', '.join(missing)} missing")
    epoch = _whole(msg, "binlogEpoch", 0, bs.MAX_EPOCH, "bad binlog identity")
    try:
        file_seq = bs.binlog_file_seq(binlog_file)
        if file_seq > MAX_FILE_SEQ:
            raise ValueError(f"binlog file sequence number out of range: {_short(file_seq)}")
        file_seq = bs.epoch_file_seq(file_seq, epoch)
        seq = bs.binlog_seq(file_seq, pos, row_idx)
    except ValueError as exc:
        raise _Bad(f"bad binlog identity: {exc}") from None
    return _Identity(binlog_file, file_seq, pos, row_idx, epoch, seq)


def _images(msg: Mapping[str, Any], kind: str) -> tuple[str, dict | None, dict | None, str | None]:
    """(op, before image, after image, DDL text) of a row change, a DDL or a TRUNCATE."""
    if kind not in ROW_TYPES:
        ddl_sql = msg.get("sql")
        if not isinstance(ddl_sql, str) or not ddl_sql.strip():
            raise _Bad(f"{kind} message without sql")
        return ("t" if kind == TRUNCATE else "ddl"), None, None, ddl_sql
    op = ROW_TYPES[kind]
    data = _one_row(msg, "data", required=True)
    if op == "c":
        return op, None, data, None
    if op == "d":
        return op, data, None, None
    before = _one_row(msg, "before", required=False)
    if before is None:
        old = _one_row(msg, "old", required=False) or {}
        before = {**data, **old}
    return op, before, data, None


def _whole(msg: Mapping[str, Any], key: str, default: int, most: int, what: str) -> int:
    """An optional whole-number field between 0 and `most`."""
    value = msg.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= most:
        raise _Bad(f"{what}: {key} is {_short(value)}")
    return value


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _short(value: Any) -> str:
    """`repr` of a message value for a reason, cut short (a value can be megabytes)."""
    if isinstance(value, int) and abs(value) >= 10**30:
        return f"<a {value.bit_length()}-bit integer>"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _one_row(msg: Mapping[str, Any], key: str, required: bool) -> dict[str, str | None] | None:
    rows = msg.get(key)
    if rows is None:
        if required:
            raise _Bad(f"{msg.get('type')} message without {key}")
        return None
    if not isinstance(rows, list) or len(rows) != 1 or not isinstance(rows[0], dict):
        raise _Bad(f"{key} must be a list holding exactly one row object")
    row = rows[0]
    for name, v in row.items():
        if v is not None and not isinstance(v, str):
            raise _Bad(f"{key}: value of column {name!r} is not a string or null: {v!r}"[:300])
    return row


def _dumps(row: Mapping[str, Any] | None) -> str | None:
    if row is None:
        return None
    return json.dumps(row, separators=(",", ":"), ensure_ascii=False)
