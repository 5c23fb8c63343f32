"""What the CDC tests that compare with the source database share: a source value as the text the comparison
uses, rows in a stable order, a source clock running from a simulated `now`, and statements run at a time of the
source's clock."""

from __future__ import annotations

import datetime as dt
import time
from decimal import Decimal
from typing import Any


def text(value: Any) -> str | None:
    """A source value as the text the comparison uses (Spark's cast to string gives the same)."""
    if value is None:
        return None
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    return str(value)


def sort_rows(rows: list[tuple]) -> list[tuple]:
    return sorted(rows, key=lambda r: tuple((v is None, v or "") for v in r))


class SimulatedClock:
    """A source clock that read `now` when this was made (and runs on from there), in epoch milliseconds."""

    def __init__(self, now: dt.datetime):
        self._offset = now.timestamp() - time.time()

    def __call__(self) -> int:
        return int((time.time() + self._offset) * 1000)


def run_sql(mariadb, db: str, when: dt.datetime, *statements: str) -> None:
    """Statements of the application at a time of the source's clock (`SET timestamp`), each committed."""
    conn = mariadb.connect(db)
    try:
        with conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")
            cur.execute("SET timestamp = %s", (int(when.replace(tzinfo=dt.UTC).timestamp()),))
            for sql in statements:
                cur.execute(sql)
    finally:
        conn.close()


class ClockedSource:
    """A scenario's database on the session's MariaDB: statements run in UTC with the source's clock set to `when`
    (`SET timestamp`), so the binlog carries the simulated time."""

    def __init__(self, mariadb, database: str, now: dt.datetime):
        self.conn = mariadb.connect(database)
        self.now = now
        with self.conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")

    def run(self, when: dt.datetime, sql: str) -> None:
        with self.conn.cursor() as cur:
            cur.execute("SET timestamp = %s", (int(when.timestamp()),))
            cur.execute(sql)
        self.now = when
