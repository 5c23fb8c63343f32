"""The source's clock: up to which event time a caught-up collector has read everything.

When the collector has read to the end of the binlog it tells the landing "everything with event time up to T
has been sent" (a heartbeat), so hours without changes can be marked done. T must come from the same clock that
stamps the binlog events, which is the source server's, not the collector host's: a collector host whose clock
runs ahead would otherwise mark hours done before their changes were written.

On a replica (`log_slave_updates`), the end of its binlog is only as far as the replica has applied the primary's
changes, while its `NOW()` runs on; event times in its binlog are the primary's. So T is the server's `NOW()`
minus the replica's lag (`Seconds_Behind_Master`), and unknown (None) when replication is stopped or broken
(lag NULL): then the collector falls back to the last committed transaction's event time.

A clock is a callable returning milliseconds since the epoch or None; `SourceClock` is the default. Reading the
lag needs the REPLICATION CLIENT privilege a CDC user has anyway (without it the server is taken to be a
primary, and an info line says so once: on a primary that is no fault).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import pymysql

log = logging.getLogger(__name__)

Clock = Callable[[], "int | None"]

NOW_SQL = "SELECT CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)"
# MySQL 8.0.22+ and MariaDB 10.5.1+ know the first, older servers only the second.
REPLICA_STATUS_SQL = ("SHOW REPLICA STATUS", "SHOW SLAVE STATUS")
LAG_COLUMNS = ("Seconds_Behind_Source", "Seconds_Behind_Master")


class ClockError(RuntimeError):
    """The source's clock could not be read."""


def caught_up_ms(now_ms: int, replica_status: Mapping[str, Any] | None) -> int | None:
    """The event time a reader at the end of this server's binlog has reached.

    `replica_status` is one row of SHOW REPLICA STATUS (column -> value), or None on a primary.
    """
    if not replica_status:
        return now_ms
    for column in LAG_COLUMNS:
        if column in replica_status:
            lag = replica_status[column]
            if lag is None:  # the SQL thread is not running: how far it got is unknown
                return None
            return now_ms - int(lag) * 1000
    return None


class SourceClock:
    """Reads `NOW()` and the replica lag of the source server over its own short-lived connection."""

    def __init__(self, connect_kwargs: Mapping[str, Any], describe: str = "the source"):
        self._kwargs = dict(connect_kwargs)
        self._describe = describe
        self._status_sql: str | None = REPLICA_STATUS_SQL[0]
        self._warned = False

    def __call__(self) -> int | None:
        try:
            conn = pymysql.connect(**self._kwargs, connect_timeout=10)
        except pymysql.err.Error as exc:
            raise ClockError(f"cannot read the clock of {self._describe}: {exc.args[-1]}") from exc
        try:
            with conn.cursor(pymysql.cursors.DictCursor) as cur:
                cur.execute(NOW_SQL)
                now_ms = int(next(iter(cur.fetchone().values())))
                return caught_up_ms(now_ms, self._replica_status(cur))
        finally:
            conn.close()

    def _replica_status(self, cur: Any) -> dict[str, Any] | None:
        while self._status_sql is not None:
            try:
                cur.execute(self._status_sql)
                return cur.fetchone()
            except pymysql.err.ProgrammingError:  # syntax: an older server
                index = REPLICA_STATUS_SQL.index(self._status_sql) + 1
                self._status_sql = REPLICA_STATUS_SQL[index] if index < len(REPLICA_STATUS_SQL) else None
            except pymysql.err.OperationalError as exc:  # 1227: no REPLICATION CLIENT privilege
                if not self._warned:  # news, not a fault: a primary with the README's grants answers so
                    log.info(
                        "%s: the replica status is not readable (%s): taking the server to be a primary (on a "
                        "replica, grant REPLICA MONITOR on MariaDB or REPLICATION CLIENT on MySQL)",
                        self._describe,
                        exc.args[-1],
                    )
                    self._warned = True
                return None
        return None
