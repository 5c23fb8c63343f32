"""The collector's resume position in the job-log database (`cdc_collector_position`), fenced per collector.

Every machine that runs the pipeline reaches the job-log database (`SHARP_LOG_DB_URL`), so a collector started on
another machine, after the collector host or the source server failed over, resumes where the last one stopped;
a local file (`collector_state.FileStateStore`) would stay behind on the old host.

Ordering: the collector saves a position only after the producer flushed every message read before that commit
without a delivery error (`Collector._checkpoint`), so the saved position is never ahead of what Kafka
acknowledged; a crash between the flush and the save repeats those messages under the same identity, which the
landing and the merge drop by `event_uid`.

Fence: loading the position is taking the row (`load`: generation + 1, owner = host:pid), and every save is a
compare-and-set on that generation. A second collector started for the same source takes the row over; the first
one's next save matches nothing and stops it with a `CollectorError` instead of moving the position under the
new owner's feet.

Followed tables: the row also keeps which tables (`db.table`) the collector that holds it captures (`follows`, a
JSON list): written when it takes the row at start, from the YAML it started with, and again on every save. A
running collector reads its tables from the YAML only when it starts, so this is what it captures now;
`cdc bootstrap --table` reads it (`collector_follows`) to refuse a table the collector does not capture yet.

Upgrade: with `legacy_file`, a source that has no position in the database yet starts from the old local state
file; the first save writes the row, after which the file is never read again.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import BigInteger, Column, DateTime, Integer, String, Table, Text, insert, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError, IntegrityError

from sharp_dagster.cdc.capture.collector_state import CollectorError, CollectorState, FileStateStore
from sharp_dagster.db import metadata
from sharp_dagster.joblog.migrate import ensure_schema
from sharp_dagster.redact import scrub_text

cdc_collector_position = Table(
    "cdc_collector_position",
    metadata,
    Column("source_id", String(128), primary_key=True),
    Column("generation", Integer, nullable=False, server_default="0"),
    Column("owner", String(255), nullable=True),
    Column("binlog_file", String(255), nullable=True),
    Column("binlog_pos", BigInteger, nullable=True),
    Column("gtid_pos", String(1024), nullable=True),
    Column("event_ts_ms", BigInteger, nullable=True),
    Column("saved_at", DateTime, nullable=True),
    Column("server_id", BigInteger, nullable=True),
    Column("binlog_epoch", Integer, nullable=False, server_default="0"),
    Column("follows", Text, nullable=True),  # JSON list of `db.table` (0005_collector_follows)
)
T = cdc_collector_position


class DbStateStore:
    """`DbStateStore(url_or_engine, source_id)`: the `StateStore` of one source in the job-log database."""

    def __init__(
        self,
        url_or_engine: str | Engine,
        source_id: str,
        legacy_file: str | Path | None = None,
        owner: str | None = None,
    ):

        self.engine = ensure_schema(url_or_engine)
        self.source_id = source_id
        self.legacy_file = Path(legacy_file) if legacy_file else None
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}"
        self.generation: int | None = None
        self.follows: str | None = None

    def load(self, follows: tuple[str, ...] | None = None) -> CollectorState | None:
        """Take the fence, record the tables this collector `follows` (when given), and return the saved
        position (else the legacy file's, else None)."""
        if follows is not None:
            self.follows = json.dumps(list(follows))
        try:
            return self._load()
        except DBAPIError as exc:
            raise CollectorError(self._unreachable("read", exc)) from None

    def save(self, state: CollectorState) -> None:
        """Write the position, only while this collector still holds the fence."""
        try:
            self._save(state)
        except DBAPIError as exc:
            raise CollectorError(self._unreachable("save", exc)) from None

    def _unreachable(self, what: str, exc: DBAPIError) -> str:

        first = (str(exc.orig or exc).strip().splitlines() or [type(exc).__name__])[0]
        password = self.engine.url.password
        text = scrub_text(first, extra_secrets=[str(password)] if password else ()) or first
        return (
            f"cannot {what} the resume position of source {self.source_id!r} in the job-log database: {text}; "
            "nothing past the last saved commit is lost, a restart repeats it"
        )

    def _load(self) -> CollectorState | None:
        try:
            with self.engine.begin() as conn:
                row = conn.execute(select(T).where(T.c.source_id == self.source_id)).first()
                if row is None:
                    first = dict(
                        source_id=self.source_id, generation=1, owner=self.owner, follows=self.follows
                    )
                    conn.execute(insert(T).values(**first))
                    self.generation = 1
                else:
                    taken = conn.execute(
                        update(T)
                        .where(T.c.source_id == self.source_id, T.c.generation == row.generation)
                        .values(generation=row.generation + 1, owner=self.owner, **self._follows())
                    )
                    if taken.rowcount != 1:
                        raise CollectorError(self._lost(f"while {self.owner} was starting"))
                    self.generation = row.generation + 1
        except IntegrityError:  # two collectors inserting the first row at once
            raise CollectorError(self._lost(f"while {self.owner} was starting")) from None
        if row is not None and row.binlog_file is not None:
            return CollectorState(
                source_id=self.source_id,
                binlog_file=row.binlog_file,
                binlog_pos=int(row.binlog_pos),
                gtid_pos=row.gtid_pos,
                event_ts_ms=row.event_ts_ms,
                saved_at_ms=int(row.saved_at.replace(tzinfo=UTC).timestamp() * 1000) if row.saved_at else 0,
                server_id=row.server_id,
                binlog_epoch=row.binlog_epoch,
            )
        if self.legacy_file is not None and self.legacy_file.exists():
            return FileStateStore(self.legacy_file).load()
        return None

    def _save(self, state: CollectorState) -> None:
        if self.generation is None:
            raise CollectorError(f"collector position of {self.source_id}: save before load")
        with self.engine.begin() as conn:
            saved = conn.execute(
                update(T)
                .where(T.c.source_id == self.source_id, T.c.generation == self.generation)
                .values(
                    binlog_file=state.binlog_file,
                    binlog_pos=state.binlog_pos,
                    gtid_pos=state.gtid_pos,
                    event_ts_ms=state.event_ts_ms,
                    saved_at=datetime.now(UTC).replace(tzinfo=None),
                    server_id=state.server_id,
                    binlog_epoch=state.binlog_epoch,
                    **self._follows(),
                )
            )
        if saved.rowcount != 1:
            raise CollectorError(self._lost("this one stops without saving"))

    def _follows(self) -> dict[str, str]:
        """The `follows` column's new value, when this collector said what it follows (else left as it is)."""
        return {} if self.follows is None else {"follows": self.follows}

    def _lost(self, what: str) -> str:
        return (
            f"the resume position of source {self.source_id!r} was taken by another collector ({what}); "
            "run one collector per source"
        )


def saved_position(url_or_engine: str | Engine, source_id: str) -> CollectorState | None:
    """The saved position of a source, read without taking the fence (for status and tests)."""

    with ensure_schema(url_or_engine).connect() as conn:
        row = conn.execute(select(T).where(T.c.source_id == source_id)).first()
    if row is None or row.binlog_file is None:
        return None
    return CollectorState(
        source_id,
        row.binlog_file,
        int(row.binlog_pos),
        row.gtid_pos,
        row.event_ts_ms,
        server_id=row.server_id,
        binlog_epoch=row.binlog_epoch,
    )


@dataclass(frozen=True)
class Followed:
    """What the collector holding a source's position row (`owner`, fencing `generation`: a restart counts it up)
    captures: `tables` (`db.table`), or None when that collector did not record them (started before 0005)."""

    owner: str | None
    generation: int
    tables: tuple[str, ...] | None


def collector_follows(url_or_engine: str | Engine, source_id: str) -> Followed | None:
    """The tables the source's collector follows, read without taking the fence; None when no collector has taken
    a position for the source yet."""

    with ensure_schema(url_or_engine).connect() as conn:
        row = conn.execute(
            select(T.c.owner, T.c.generation, T.c.follows).where(T.c.source_id == source_id)
        ).first()
    if row is None:
        return None
    if row.follows is None:
        return Followed(row.owner, row.generation, None)
    try:
        tables = json.loads(row.follows)
        if not isinstance(tables, list) or not all(isinstance(t, str) for t in tables):
            raise ValueError("not a list of table names")
    except ValueError as exc:
        raise CollectorError(
            f"cdc_collector_position.follows of source {source_id!r}: {exc}; restart `cdc collect` to rewrite it"
        ) from None
    return Followed(row.owner, row.generation, tuple(tables))
