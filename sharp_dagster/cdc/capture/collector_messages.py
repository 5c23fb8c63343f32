"""The collector's messages for the binlog events it reads: one per row change, one per DDL / TRUNCATE statement.

Identity: each message carries the START position of its event (`log_pos - event_size` from the event header) and
the row's index inside it, both of which a replay from an earlier commit reproduces, so a change sent twice is sent
under one identity (`event_uid`). Kafka key: `<logical table>|<json list of primary-key values>` (the key after an
update that changes it), so all changes of one key stay in one partition in binlog order; statements have no key
and go to partition 0 (as Canal sends DDL). Times: `event_ts_ms` is the event's header time (the statement's
start, Canal's `es`); the commit time is added when the transaction commits (`txn_buffer.py`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pymysqlreplication.row_event import UpdateRowsEvent, WriteRowsEvent

from sharp_dagster.cdc.capture.binlog_events import column_type, jdbc_type, row_image
from sharp_dagster.cdc.change.messages import BinlogMessage, update_old_values
from sharp_dagster.cdc.source.config import DatabaseConfig


@dataclass(frozen=True)
class EventContext:
    """What a message needs beyond its event: where the stream is, and which transaction and epoch it is in."""

    source_id: str
    log_file: str
    gtid: str | None
    binlog_epoch: int


def event_start(event: Any) -> int:
    """The binlog position where the event starts (the header's `log_pos` is where the next one starts)."""
    return event.packet.log_pos - event.packet.event_size


def row_messages(
    event: Any, db: DatabaseConfig, logical: str, ctx: EventContext
) -> Iterator[tuple[BinlogMessage, bytes]]:
    """One message per row of a rows event of `db`'s logical table `logical`, with its Kafka key."""
    table = db.table(logical)
    binlog_pk = event.primary_key
    pk_names = (
        [binlog_pk]
        if isinstance(binlog_pk, str) and binlog_pk
        else list(binlog_pk or ()) or list(table.primary_key)
    )
    mysql_type = {c.name: column_type(c) for c in event.columns if c.name}
    sql_type = {name: jdbc_type(t) for name, t in mysql_type.items()}
    if isinstance(event, WriteRowsEvent):
        kind = "INSERT"
    elif isinstance(event, UpdateRowsEvent):
        kind = "UPDATE"
    else:
        kind = "DELETE"
    for idx, row in enumerate(event.rows):
        before = None
        if kind == "UPDATE":
            before = row_image(row["before_values"], row.get("before_none_sources"))
            data = row_image(row["after_values"], row.get("after_none_sources"), before)
            old = update_old_values(before, data)
        else:
            data = row_image(row["values"], row.get("none_sources"))
            old = None
        message = BinlogMessage(
            **_event_fields(event, kind, ctx, db.name, event.table, idx),
            pk_names=pk_names,
            data=data,
            old=old,
            before=before,
            mysql_type=mysql_type,
            sql_type=sql_type,
        )
        key = f"{logical}|" + json.dumps([data.get(c) for c in table.primary_key], separators=(",", ":"))
        yield message, key.encode("utf-8")


def statement_messages(
    event: Any, kind: str, tables: list[tuple[DatabaseConfig, str, str]], sql: str, ctx: EventContext
) -> Iterator[BinlogMessage]:
    """One message per configured table a DDL / TRUNCATE statement names: (database, physical, logical) each."""
    for idx, (db, table, logical) in enumerate(tables):
        yield BinlogMessage(
            **_event_fields(event, kind, ctx, db.name, table, idx),
            pk_names=list(db.table(logical).primary_key),
            sql=sql,
        )


def _event_fields(
    event: Any, kind: str, ctx: EventContext, database: str, table: str, row_idx: int
) -> dict[str, Any]:
    """The fields every message of `event` carries: its kind, source, table, time and binlog identity."""
    return {
        "type": kind,
        "source_id": ctx.source_id,
        "database": database,
        "table": table,
        "event_ts_ms": event.timestamp * 1000,
        "binlog_file": ctx.log_file,
        "binlog_pos": event_start(event),
        "row_idx": row_idx,
        "binlog_epoch": ctx.binlog_epoch,
        "gtid": ctx.gtid,
        "server_id": event.packet.server_id,
    }
