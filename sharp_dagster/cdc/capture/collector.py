"""The binlog collector: reads a MySQL/MariaDB row binlog and sends one Kafka message per row change.

This is the capture half of the binlog CDC design (the role Canal + CanalClient play elsewhere).
The `Collector` reads the row binlog with python-mysql-replication
(`BinLogStreamReader`) and sends, per configured source database, to that database's topic (`binlog.<db>`):
one message per row change (INSERT/UPDATE/DELETE, see `messages.py`), one per DDL statement and TRUNCATE touching a
configured table, and HEARTBEAT messages that carry the collector's progress in event time.

Commit time: a transaction's messages are held (`txn_buffer.py`: in memory up to `txn_memory_bytes`, then spilled
to a temp file) until its commit event (Xid; the COMMIT/ROLLBACK query of non-transactional tables; the statement
itself for DDL), and then sent together, each carrying `commitTs`, the commit event's time, next to `es`, its
statement time. The landing places a change in the day and hour of its commit, so a transaction that spans
midnight belongs wholly to the day it committed in, as it does for any reader of the source.

Partitioning (`collector_messages.py`): by logical table and primary key, so one key's changes keep binlog order in
one partition; order ACROSS partitions is not kept and need not be: the merge orders by binlog identity.

Delivery is at least once, never lossy:
- the resume position (binlog file + position of the next event, and on MariaDB the GTID of the last committed
  transaction per domain) is saved only at a transaction commit (Xid; COMMIT/ROLLBACK queries for
  non-transactional tables; the statement itself for DDL and other standalone groups), and only after the producer
  flushed every message sent before it without a delivery error;
- a restart resumes at the last saved commit: on MariaDB by GTID (`is_mariadb=True`, `auto_position`), on MySQL
  by file + position (`resume_stream=True`). On MariaDB it may resume on another server with the same GTIDs (a
  replica after a failover): the saved position records the server id it was read from, and on another server
  the collector counts the binlog epoch up (`binlog_schema.epoch_file_seq`), so that the new server's positions
  order after the old one's. MySQL, resuming by file and position, refuses another server. Changes after that commit are sent again, with the same identity,
  because the identity is the START position of the rows event (`log_pos - event_size` from the event header) and
  the row's index inside it, both of which a replay reproduces; the merge drops the repeats by `event_uid`.
Flushing after every transaction would be slow, so the collector flushes and saves every `flush_max_messages`
messages or `flush_interval_s` seconds, at the next commit, and when it stops.

Table maps (sent before every statement) are parsed once per table id (`freeze_schema`; an id names one table
definition of one server run, a DDL gets a new one); ids are forgotten at every binlog file and reconnect.

Heartbeats: after a flush, at most every `heartbeat_interval_s`, and whenever the collector has caught up with the
end of the binlog (end of binlog with `once`, or a heartbeat event from the server when idle), it sends to every
partition of every topic a HEARTBEAT with `es` = the commit time up to which everything has been sent: the
source server's clock when caught up, minus a replica's lag (`source_clock.py`), else the last sent
transaction's commit time, and never past the first statement of a transaction being read but not committed yet
(`_heartbeat_es`). The collector host's own clock is never used for event time. The landing's done markers need
them so that a partition without changes still shows progress. A transaction still open on the server is not
in the binlog yet; it will be placed at its commit, which is later than the clock read now, so it does not hold
the heartbeat (holding it would let one forgotten open session stop every merge); the landing's lateness
window covers the moment between a commit event's time and its write to the binlog.

The parts: `collector_messages.py` (the messages of an event), `collector_output.py` (the producer and its flush),
`collector_state.py` / `collector_db.py` (the resume position and where it is saved), `kafka_topics.py` (producer
defaults, topics), `binlog_events.py` (DDL statements, column types, row images), `binlog_server.py` (server settings and
binlog positions read outside the stream).

The connection password is never logged: python-mysql-replication's own parameter logging is turned off
(`enable_logging=False`), because it would print control-connection settings.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pymysql
from confluent_kafka import KafkaException
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import (
    GtidEvent,
    HeartbeatLogEvent,
    MariadbGtidEvent,
    QueryEvent,
    RotateEvent,
    XidEvent,
)
from pymysqlreplication.row_event import (
    DeleteRowsEvent,
    UpdateRowsEvent,
    WriteRowsEvent,
)

from sharp_dagster.cdc.capture import binlog_server
from sharp_dagster.cdc.capture.binlog_events import parse_ddl
from sharp_dagster.cdc.capture.collector_messages import (
    EventContext,
    row_messages,
    statement_messages,
)
from sharp_dagster.cdc.capture.collector_output import KafkaOutput
from sharp_dagster.cdc.capture.collector_state import (
    CollectorError,
    CollectorState,
    FileStateStore,
    StateStore,
    followed_tables,
    format_gtid_pos,
    parse_gtid_pos,
)
from sharp_dagster.cdc.capture.kafka_topics import PRODUCER_DEFAULTS, ensure_topic
from sharp_dagster.cdc.capture.txn_buffer import DEFAULT_MEMORY_BYTES, TxnBuffer
from sharp_dagster.cdc.change.binlog_schema import binlog_file_seq
from sharp_dagster.cdc.change.messages import HEARTBEAT, BinlogMessage
from sharp_dagster.cdc.source.clock import Clock, SourceClock
from sharp_dagster.cdc.source.config import DatabaseConfig, MysqlSettings, SourceConfig

log = logging.getLogger(__name__)

ONLY_EVENTS = [
    WriteRowsEvent,
    UpdateRowsEvent,
    DeleteRowsEvent,
    QueryEvent,
    XidEvent,
    GtidEvent,
    MariadbGtidEvent,
    RotateEvent,
    HeartbeatLogEvent,
]
MARIADB_FL_STANDALONE = 0x01  # GTID event flag: the group is one statement without BEGIN/COMMIT (DDL)
START_MODES = ("earliest", "current")
_START_POSITION = re.compile(r"^(\d+-\d+-\d+(,\d+-\d+-\d+)*|[^:]+\.\d+:\d+)$")
ONCE_HEARTBEAT_S = 0.2  # with `once`, how soon an idle server tells the collector that it has caught up


@dataclass
class CollectStats:
    messages: int = 0
    row_changes: int = 0
    statements: int = 0  # DDL and TRUNCATE messages
    heartbeats: int = 0
    commits: int = 0
    checkpoints: int = 0
    stopped_by: str = ""
    start_gtid: str | None = None
    reconnects: int = 0
    spilled: int = 0  # transactions larger than txn_memory_bytes, held on disk until their commit
    state: CollectorState | None = None
    per_table: dict[str, int] = field(default_factory=dict)


@dataclass
class _Group:
    gtid: str | None = None
    domain: int | None = None
    in_txn: bool = False


class Collector:
    """`Collector(mysql, producer_config, source, state).run(once=True)`; `stop()` ends `run` cleanly."""

    def __init__(
        self,
        mysql: MysqlSettings,
        producer_config: dict[str, Any],
        source: SourceConfig,
        state: str | Path | StateStore,
        *,
        start: str = "earliest",
        flush_interval_s: float = 1.0,
        flush_max_messages: int = 5000,
        heartbeat_interval_s: float = 30.0,
        server_heartbeat_s: float = 1.0,
        clock: Clock | None = None,
        txn_memory_bytes: int = DEFAULT_MEMORY_BYTES,
        spill_dir: str | None = None,
    ):
        self.mysql = mysql
        # Event time up to which a caught-up reader has everything: the source server's clock (source_clock.py).
        self.clock: Clock = clock or SourceClock(mysql.pymysql_kwargs(), mysql.describe())
        self.producer_config = {**PRODUCER_DEFAULTS, **producer_config}
        self.source = source
        self.store: StateStore = FileStateStore(state) if isinstance(state, (str, Path)) else state
        if start not in START_MODES and not _START_POSITION.match(start):
            raise CollectorError(
                f"start must be earliest, current, a GTID position (0-1-42) or file:pos, got {start!r}"
            )
        self.start = start
        self.flush_interval_s = flush_interval_s
        self.flush_max_messages = max(1, flush_max_messages)
        self.heartbeat_interval_s = heartbeat_interval_s
        self.server_heartbeat_s = server_heartbeat_s
        self._stop = threading.Event()
        self._txn = TxnBuffer(txn_memory_bytes, spill_dir)
        self._dbs: dict[str, DatabaseConfig] = {db.name: db for db in source.databases}
        self._rules = {db.name: db.shard_rules for db in source.databases}

    def stop(self) -> None:
        """Ask `run` to stop after the current event (safe from a signal handler or another thread)."""
        self._stop.set()

    # ------------------------------------------------------------------ run
    def run(self, once: bool = False) -> CollectStats:
        """Read the binlog from the saved position; with `once`, stop at the current end of the binlog."""
        try:
            return self._run(once)
        except pymysql.err.Error as exc:
            # e.g. 1236 "could not find GTID state requested by slave": the start position was purged.
            raise CollectorError(f"binlog stream from {self.mysql.describe()}: {exc.args[-1]}") from exc
        except KafkaException as exc:
            raise CollectorError(f"Kafka at {self.producer_config.get('bootstrap.servers')}: {exc}") from exc

    def _run(self, once: bool) -> CollectStats:
        self._stats = CollectStats()
        binlog_server.check_server(self.mysql, self.source.flavor)
        saved = self.store.load(follows=followed_tables(self.source))
        if saved is not None and saved.source_id != self.source.source_id:
            raise CollectorError(
                f"state belongs to source {saved.source_id!r}, the config says {self.source.source_id!r}"
            )
        self._saved = saved
        self._server_id, self._epoch = binlog_server.resume_epoch(self.mysql, self.source.flavor, saved)
        self._pending: CollectorState | None = None
        self._gtids: dict[int, str] = parse_gtid_pos(saved.gtid_pos if saved else None)
        self._group = _Group()
        self._txn.clear()
        spilled_before = self._txn.transactions_spilled
        self._last_heartbeat = 0.0
        self._last_commit_es: int | None = saved.event_ts_ms if saved else None
        self._out = KafkaOutput(self.producer_config)
        self._partitions = {
            db.topic: ensure_topic(self.producer_config, db.topic, self.source.topic_partitions)
            for db in self.source.databases
        }
        end = binlog_server.binlog_end(self.mysql) if once else None
        stream = self._open_stream(saved, once)
        stopped_by = "eof"
        try:
            while True:
                if self._stop.is_set():
                    stopped_by = "stop"
                    break
                event = stream.fetchone()
                if event is None:
                    break
                self._handle(event, stream)
                self._maybe_checkpoint()
                if end is not None and not self._group.in_txn:
                    # `once`: stop at the end the binlog had when the run began, or when the server says it
                    # has nothing more (heartbeat), whichever comes first.
                    if isinstance(event, HeartbeatLogEvent) or _at_or_after(
                        stream.log_file, stream.log_pos, end
                    ):
                        break
            self._checkpoint(heartbeat=False)
            if stopped_by == "eof" and not self._group.in_txn:
                self._send_caught_up_heartbeats()
        finally:
            stream.close()
            remaining = self._out.close()
            if remaining:
                log.error("%d messages still undelivered when the collector stopped", remaining)
        self._stats.stopped_by = stopped_by
        self._stats.spilled = self._txn.transactions_spilled - spilled_before
        self._stats.state = self._saved
        return self._stats

    def _open_stream(self, saved: CollectorState | None, once: bool) -> BinLogStreamReader:
        beat = min(self.server_heartbeat_s, ONCE_HEARTBEAT_S) if once else self.server_heartbeat_s
        kwargs: dict[str, Any] = dict(
            connection_settings=self.mysql.replication_settings(),
            server_id=self.source.replica_server_id,
            only_events=ONLY_EVENTS,
            only_schemas=list(self._dbs),
            # Always blocking: a non-blocking dump makes MariaDB 10.11 reset the connection at the end of the
            # binlog, discarding what the client had not read yet; `once` stops at the end position instead.
            blocking=True,
            slave_heartbeat=beat,
            resume_stream=True,
            freeze_schema=True,  # the library's table-map cache (module docstring, `_handle`)
            enable_logging=False,
            pymysql_wrapper=self._connect,
        )
        if self.source.flavor == "mariadb":
            kwargs["is_mariadb"] = True
            gtid = saved.gtid_pos if saved else binlog_server.start_gtid(self.mysql, self.start)
            if gtid:
                kwargs["auto_position"] = gtid
            self._stats.start_gtid = gtid
        else:
            if saved is not None:
                kwargs["log_file"], kwargs["log_pos"] = saved.binlog_file, saved.binlog_pos
            elif self.start == "earliest":
                kwargs["log_file"], kwargs["log_pos"] = binlog_server.first_binlog(self.mysql), 4
            elif ":" in self.start:
                file_name, _, pos = self.start.rpartition(":")
                kwargs["log_file"], kwargs["log_pos"] = file_name, int(pos)
        self._stream_connects = 0
        self._stream = BinLogStreamReader(**kwargs)
        return self._stream

    def _connect(self, **settings: Any) -> pymysql.Connection:
        """python-mysql-replication's connection factory, hooked to make its reconnects resume at a commit.

        The library reconnects by itself when the server drops the stream (2013/2006; MariaDB resets a
        non-blocking dump at the end of the binlog now and then). It would resume at its own start settings: on
        MariaDB the GTID it was created with (replaying everything since, again and again), on MySQL the last
        event's position, possibly inside a transaction whose table-map events it would then never see. So
        before the stream connection is re-opened, point it at the last commit read: the partial transaction is
        read again and its changes sent again under the same identities.
        """
        if "db" not in settings:  # the control connection reads information_schema; the stream has no db
            self._stream_connects += 1
            if self._stream_connects > 1:
                self._resume_at_last_commit()
        return pymysql.connect(**settings)

    def _resume_at_last_commit(self) -> None:
        stream = self._stream
        last = self._pending or self._saved
        if self.source.flavor == "mariadb":
            stream.auto_position = last.gtid_pos if last else self._stats.start_gtid
        elif last is not None:
            stream.log_file, stream.log_pos = last.binlog_file, last.binlog_pos
        self._group = _Group()
        self._txn.clear()  # the partial transaction is read again, whole, from the last commit
        stream.table_map = {}  # its table maps too, perhaps from another server (a failover)
        self._stats.reconnects += 1
        log.warning(
            "binlog stream of %s lost; reconnecting at %s",
            self.mysql.describe(),
            f"{last.binlog_file}:{last.binlog_pos} gtid {last.gtid_pos}" if last else "the start position",
        )

    # ------------------------------------------------------------------ events
    def _handle(self, event: Any, stream: BinLogStreamReader) -> None:
        if isinstance(event, (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)):
            self._on_rows(event, stream)
        elif isinstance(event, XidEvent):
            self._on_commit(event, stream)
        elif isinstance(event, MariadbGtidEvent):
            standalone = bool(event.flags & MARIADB_FL_STANDALONE)
            self._group = _Group(gtid=event.gtid, domain=event.domain_id, in_txn=not standalone)
        elif isinstance(event, GtidEvent):
            self._group = _Group(gtid=event.gtid, domain=None, in_txn=False)
        elif isinstance(event, QueryEvent):
            self._on_query(event, stream)
        elif isinstance(event, RotateEvent):
            stream.table_map = {}
        elif isinstance(event, HeartbeatLogEvent):
            # The server sends these only when it has nothing else to send: caught up.
            if not self._group.in_txn:
                self._checkpoint(heartbeat=False)
                if time.monotonic() - self._last_heartbeat >= self.heartbeat_interval_s:
                    self._send_caught_up_heartbeats()

    def _on_query(self, event: QueryEvent, stream: BinLogStreamReader) -> None:
        query = event.query.strip()
        head = query[:10].upper()
        if head.startswith("BEGIN") or head.startswith("START TRAN"):
            self._group.in_txn = True
            return
        if head.startswith("COMMIT") or (head.startswith("ROLLBACK") and " TO " not in query.upper()):
            self._on_commit(event, stream)
            return
        schema = event.schema.decode() if isinstance(event.schema, bytes) else (event.schema or "")
        parsed = parse_ddl(query, schema)
        if parsed is not None:
            kind, names = parsed
            self._send_statement(event, stream, kind, names, query)
        if not self._group.in_txn:
            self._on_commit(event, stream)  # DDL commits by itself

    def _send_statement(
        self, event: QueryEvent, stream, kind: str, names: list[tuple[str, str]], sql: str
    ) -> None:
        tables = []
        for db_name, table in names:
            db = self._dbs.get(db_name)
            logical = self._rules[db_name].fold(table) if db else None
            if db is not None and logical is not None:
                tables.append((db, table, logical))
        messages = statement_messages(event, kind, tables, sql, self._context(stream))
        for (db, _, logical), message in zip(tables, messages, strict=True):
            self._hold(db.topic, message, key=None, partition=0)
            self._stats.statements += 1
            self._count(db.name, logical)

    def _on_rows(self, event: Any, stream: BinLogStreamReader) -> None:
        db = self._dbs.get(event.schema)
        logical = self._rules[event.schema].fold(event.table) if db else None
        if db is None or logical is None:
            return
        for message, key in row_messages(event, db, logical, self._context(stream)):
            self._hold(db.topic, message, key=key)
            self._stats.row_changes += 1
            self._count(db.name, logical)

    def _context(self, stream: BinLogStreamReader) -> EventContext:
        return EventContext(self.source.source_id, stream.log_file, self._group.gtid, self._epoch)

    def _on_commit(self, event: Any, stream: BinLogStreamReader) -> None:
        """Send the transaction's held messages with its commit time; its end is the next resume position."""
        commit_ms = event.timestamp * 1000
        for topic, partition, key, value in self._txn.drain(commit_ms):
            self._produce(topic, value, key, partition)
        if self._group.gtid and self._group.domain is not None:
            self._gtids[self._group.domain] = self._group.gtid
        self._pending = CollectorState(
            source_id=self.source.source_id,
            binlog_file=stream.log_file,
            binlog_pos=event.packet.log_pos,
            gtid_pos=format_gtid_pos(self._gtids),
            event_ts_ms=commit_ms,
            server_id=self._server_id,
            binlog_epoch=self._epoch,
        )
        self._last_commit_es = commit_ms
        self._group = _Group()
        self._stats.commits += 1

    def _count(self, db: str, logical: str) -> None:
        key = f"{db}.{logical}"
        self._stats.per_table[key] = self._stats.per_table.get(key, 0) + 1

    # ------------------------------------------------------------------ producing
    def _hold(
        self, topic: str, message: BinlogMessage, key: bytes | None, partition: int | None = None
    ) -> None:
        """Keep a change of the open transaction until its commit event (`_on_commit` sends it)."""
        self._txn.add(topic, partition, key, self._out.encoded(message), message.event_ts_ms)

    def _send(
        self, topic: str, message: BinlogMessage, key: bytes | None, partition: int | None = None
    ) -> None:
        self._produce(topic, self._out.encoded(message), key, partition)

    def _produce(self, topic: str, value: bytes, key: bytes | None, partition: int | None) -> None:
        self._out.produce(topic, value, key, partition)
        self._stats.messages += 1

    def _maybe_checkpoint(self) -> None:
        if self._pending is None:
            return
        if (
            self._out.since_flush >= self.flush_max_messages
            or time.monotonic() - self._out.last_flush >= self.flush_interval_s
        ):
            self._checkpoint()

    def _checkpoint(self, heartbeat: bool = True) -> None:
        """Flush, then save the last commit position (never a position inside a transaction)."""
        if self._pending is None:
            if self._out.since_flush:
                self._out.flush()
            return
        self._out.flush()
        state = CollectorState(**{**asdict(self._pending), "saved_at_ms": int(time.time() * 1000)})
        self.store.save(state)
        self._saved = state
        self._pending = None
        self._stats.checkpoints += 1
        due = time.monotonic() - self._last_heartbeat >= self.heartbeat_interval_s
        if heartbeat and due and self._last_commit_es is not None:
            self._send_heartbeats(self._heartbeat_es(self._last_commit_es))

    def _send_caught_up_heartbeats(self) -> None:
        """At the end of the binlog: everything up to the source's clock (never behind the last commit)."""
        es = self.clock()
        if es is None or (self._last_commit_es is not None and es < self._last_commit_es):
            es = self._last_commit_es  # replication stopped, or a clock behind its own events
        if es is not None:
            self._send_heartbeats(self._heartbeat_es(es))

    def _heartbeat_es(self, es: int) -> int:
        """`es`, held back to the first statement of a transaction read but not committed yet.

        Its changes will carry a commit time at or after that statement (and after the last sent commit): a
        heartbeat past it could mark their hour done before they are sent.
        """
        start = self._txn.start_es_ms
        if start is None or start >= es:
            return es
        return max(start, self._last_commit_es or start)

    def _send_heartbeats(self, es_ms: int) -> None:
        """Tell every partition: all changes with event time up to `es_ms` have been sent (and flushed)."""
        self._out.flush()
        for db in self.source.databases:
            for partition in range(self._partitions[db.topic]):
                message = BinlogMessage(
                    type=HEARTBEAT,
                    source_id=self.source.source_id,
                    database=db.name,
                    table="",
                    event_ts_ms=es_ms,
                    binlog_file=self._saved.binlog_file if self._saved else "",
                    binlog_pos=self._saved.binlog_pos if self._saved else 0,
                    gtid=self._saved.gtid_pos if self._saved else None,
                )
                self._send(db.topic, message, key=None, partition=partition)
                self._stats.heartbeats += 1
        self._out.flush()
        self._last_heartbeat = time.monotonic()


def _at_or_after(log_file: str | None, log_pos: int | None, end: tuple[str, int]) -> bool:
    if not log_file or log_pos is None:
        return False
    return (binlog_file_seq(log_file), log_pos) >= (binlog_file_seq(end[0]), end[1])
