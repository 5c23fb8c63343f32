"""Runs an `oracle_workload.Plan` on a real MariaDB in simulated time and reads the source at each day's end.

`SourceRunner.run_until(t)` executes the plan's events before `t` in time order, each on its connection after
`SET timestamp` (the source's clock, so NOW() and the binlog events carry the simulated time). Before the first
event at or after a midnight (or at the end of a run that reaches it) it reads every table through a separate
autocommit connection, which sees committed transactions only: the source as it stood at the end of that day by
commit time, the state the ODS partition of that day must equal.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sharp_dagster_tests.cdc.oracle_schema import PHYSICAL, SHARD_COLUMN, SNAPSHOT_DAY, at
from sharp_dagster_tests.cdc.oracle_workload import Plan
from sharp_dagster_tests.cdc.source_support import sort_rows, text  # (a DATE reads as its ISO text)

# table -> (column names, rows as text, sorted)
TableContent = tuple[list[str], list[tuple]]


class SourceRunner:
    def __init__(self, mariadb, database: str, plan: Plan):
        self.mariadb = mariadb
        self.database = database
        self.events = plan.events
        self.position = 0
        self.clock = at(SNAPSHOT_DAY, 0)  # the simulated time the plan has run up to
        self.next_midnight = at(SNAPSHOT_DAY, 0) + dt.timedelta(days=1)
        self.states: dict[str, dict[str, TableContent]] = {}  # day -> table -> content at the day's end
        self.executed: dict[str, int] = {}  # day -> statements run (by statement time)
        self._conns: dict[str, Any] = {}
        self._reader = self._connect()

    def _connect(self):
        conn = self.mariadb.connect(self.database)
        with conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")  # NOW() and DATETIMEs in UTC, as the binlog times
            # The plan's concurrent transactions touch disjoint keys; READ COMMITTED takes no gap locks, so none
            # waits for another. A lock wait would mean the plan is wrong: fail fast instead of hanging.
            cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
            cur.execute("SET SESSION innodb_lock_wait_timeout = 5, lock_wait_timeout = 5")
        return conn

    def conn(self, slot: str):
        if slot not in self._conns:
            self._conns[slot] = self._connect()
        return self._conns[slot]

    def run_until(self, until: dt.datetime) -> None:
        """Execute every event before `until`; read the tables at each midnight crossed (see module doc)."""
        while self.position < len(self.events) and self.events[self.position].at < until:
            event = self.events[self.position]
            self._midnights_up_to(event.at)
            with self.conn(event.slot).cursor() as cur:
                cur.execute("SET timestamp = %s", (int(event.at.timestamp()),))
                try:
                    cur.execute(event.sql)
                except Exception as exc:
                    raise AssertionError(f"{event.at} [{event.slot}] {event.sql}: {exc}") from exc
                if event.dml:
                    assert cur.rowcount >= 1, f"{event.at} [{event.slot}] changed nothing: {event.sql}"
            day = event.at.date().isoformat()
            self.executed[day] = self.executed.get(day, 0) + 1
            self.position += 1
        self._midnights_up_to(until)
        self.clock = max(self.clock, until)

    @property
    def done(self) -> bool:
        return self.position == len(self.events)

    def _midnights_up_to(self, when: dt.datetime) -> None:
        while self.next_midnight <= when:
            day = (self.next_midnight - dt.timedelta(days=1)).date().isoformat()
            self.states[day] = self.read_all()
            self.next_midnight += dt.timedelta(days=1)

    def read_all(self) -> dict[str, TableContent]:
        return {table: self.read(table) for table in PHYSICAL}

    def read(self, table: str) -> TableContent:
        """(columns, rows as text) of a logical table now; a sharded table's rows carry their physical table."""
        physical = PHYSICAL[table]
        if len(physical) == 1:
            query = f"SELECT * FROM `{table}`"
        else:  # one statement: one consistent read of every shard
            query = " UNION ALL ".join(
                f"SELECT '{p}' AS `{SHARD_COLUMN}`, t.* FROM `{p}` t" for p in physical
            )
        with self._reader.cursor() as cur:
            cur.execute(query)
            return [d[0] for d in cur.description], sort_rows([tuple(map(text, r)) for r in cur.fetchall()])

    def gtid_pos(self) -> str:
        with self._reader.cursor() as cur:
            cur.execute("SELECT @@GLOBAL.gtid_binlog_pos")
            return cur.fetchone()[0]

    def close(self) -> None:
        for conn in [*self._conns.values(), self._reader]:
            conn.close()  # a transaction still open rolls back
        self._conns.clear()
