"""The collector's resume position (`CollectorState`), where it is kept (`FileStateStore`), and its error."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

from sharp_dagster.cdc.source.config import SourceConfig


class CollectorError(RuntimeError):
    """The collector cannot go on (bad server settings, undelivered messages, unreadable state)."""


@dataclass(frozen=True)
class CollectorState:
    """The resume position: the binlog position of the event after the last saved commit."""

    source_id: str
    binlog_file: str
    binlog_pos: int
    gtid_pos: str | None = None  # MariaDB: last committed GTID per domain, comma-separated (`0-1-42,1-1-7`)
    event_ts_ms: int | None = None
    saved_at_ms: int = 0
    server_id: int | None = (
        None  # @@server_id of the server read, whose binlog the file and position belong to
    )
    binlog_epoch: int = 0  # counted up when the collector resumes on another server (`binlog_schema`)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str, origin: str = "state") -> CollectorState:
        try:
            data = json.loads(text)
            return cls(**data)
        except (ValueError, TypeError) as exc:
            raise CollectorError(f"{origin}: not a collector state: {exc}") from exc


def followed_tables(source: SourceConfig) -> tuple[str, ...]:
    """The tables a collector of `source` captures, as `db.table` (the YAML's logical names), sorted: what it
    records with its position (`collector_db`), for `cdc bootstrap --table` to check."""
    return tuple(sorted(f"{db.name}.{t.name}" for db in source.databases for t in db.tables))


class StateStore(Protocol):
    def load(self, follows: tuple[str, ...] | None = None) -> CollectorState | None:
        """Take the position; `follows`: the tables the collector taking it captures (recorded where kept)."""
        ...

    def save(self, state: CollectorState) -> None: ...


class FileStateStore:
    """The state as a JSON file, replaced atomically (write a temp file, fsync, rename)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def load(self, follows: tuple[str, ...] | None = None) -> CollectorState | None:
        """`follows` is not kept: `cdc bootstrap --table` checks it in the job-log database (`DbStateStore`)."""
        if not self.path.exists():
            return None
        return CollectorState.from_json(self.path.read_text(), origin=str(self.path))

    def save(self, state: CollectorState) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".state.", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w") as fh:
                fh.write(state.to_json())
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def parse_gtid_pos(text: str | None) -> dict[int, str]:
    """`0-1-42,1-1-7` -> {domain: GTID}."""
    gtids: dict[int, str] = {}
    for part in (text or "").split(","):
        part = part.strip()
        if part:
            gtids[int(part.split("-", 1)[0])] = part
    return gtids


def format_gtid_pos(gtids: dict[int, str]) -> str | None:
    return ",".join(gtids[d] for d in sorted(gtids)) or None
