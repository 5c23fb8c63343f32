"""The job log outside Dagster: claiming a period, heartbeats, steps, finishing, takeover, and the queries.

Guarantees (by construction on SQLite, PostgreSQL and MySQL; tested on SQLite and PostgreSQL):

* At most one run holds a period (`job_schedule_id`) at a time. A claim is an INSERT into `job_claim`; its primary
  key turns a concurrent second claim into an IntegrityError, which becomes `ClaimRefused` naming the holder.
  (Sharp ETL did SELECT-then-INSERT, so two simultaneous starts both ran.)
* A holder that stopped sending heartbeats for `stale_after_s` (`SHARP_CLAIM_TIMEOUT_S`, default 120 s) is taken
  over by a compare-and-set UPDATE of its claim row that matches the job id *and the heartbeat time the taker read
  and judged stale*: a holder whose heartbeat lands between that read and the UPDATE keeps its claim (the UPDATE
  changes no row) and its job_log row is left alone. Only a successful takeover marks the old row FAILURE. A
  taken-over run finds out at its next heartbeat or at `finish`, which then raises `ClaimLost` and records nothing.
  `inspect_claim` + `take_over` are the two steps of that takeover, public so that tests can interleave a
  heartbeat between them without sleeping.
* Every claim carries a fencing token, its attempt number (`JobHandle.token`). `assert_current(handle, token)`
  checks in one transaction that the period's claim is still held by the attempt with that token and records the
  publish (`job_log.publish_time`); a table commit made after it cannot come from a run that lost its claim
  before the check. It also refreshes the heartbeat, so a takeover needs a whole claim timeout after the check:
  the commit that follows must take less than that (the remaining window).
* Heartbeats are sent every `heartbeat_interval_s()`: `SHARP_HEARTBEAT_INTERVAL_S`, else min(10 s, a quarter of
  the claim timeout), so a claim timeout under 10 s never loses a healthy holder.
* `finish` deletes the claim and writes the final status in one transaction.
* Every status change of a time-window period also updates the asset's success spans (`spans.py`) in the same
  transaction: a claim removes the period, a success adds it, so the planner reads job_log rows only inside the
  gaps between spans.

Transactions that write always write first: SQLite (pysqlite) starts its transaction lazily at the first write,
and a transaction that read first could not upgrade its lock once another process has written.

The work is split by concern; `JobLog` inherits it: `claims.py` (claim, heartbeat, finish, run), `fencing.py`
(`assert_current`), `takeover.py` (ending a stale job by hand), `steps.py` (steps and row attributes),
`queries.py` (reads), on `base.py` (what they share). `errors.py` holds the exceptions, `records.py` the handles
and rows, `heartbeat.py` the claim timeout and the heartbeat thread.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import Engine

from sharp_dagster.db import make_engine
from sharp_dagster.joblog import spans as spans_mod
from sharp_dagster.joblog.claims import ClaimsMixin
from sharp_dagster.joblog.fencing import FencingMixin
from sharp_dagster.joblog.migrate import ensure_schema
from sharp_dagster.joblog.models import TIMEWINDOW, job_log
from sharp_dagster.joblog.queries import QueriesMixin
from sharp_dagster.joblog.steps import StepsMixin
from sharp_dagster.joblog.takeover import TakeoverMixin


def utcnow() -> datetime:
    """Naive UTC now: the one clock of the job log."""
    return datetime.now(UTC).replace(tzinfo=None)


class JobLog(ClaimsMixin, FencingMixin, TakeoverMixin, StepsMixin, QueriesMixin):
    """The job log of one database. `engine_or_url`: an Engine, a URL, or None for `SHARP_LOG_DB_URL`."""

    def __init__(
        self,
        engine_or_url: Engine | str | None = None,
        *,
        clock: Callable[[], datetime] | None = None,
    ):
        engine = engine_or_url if isinstance(engine_or_url, Engine) else make_engine(engine_or_url)
        self.engine = ensure_schema(engine)
        self._clock = clock or utcnow
        self._assets_known = set()
        self.takeover_hook: Callable[[Any], None] | None = None  # see `JobLogBase.takeover_hook`

    # ------------------------------------------------------------------ success spans

    def rebuild_spans(self, job_name: str) -> int:
        """Recompute an asset's success spans from its time-window rows (latest attempt per period).

        Needed only for rows written by something other than this class (imports, benchmarks). Returns the
        number of spans.
        """
        self._ensure_asset(job_name)
        c = job_log.c
        with self.engine.begin() as conn:
            # Lock first: claims take the same lock, so none can slip in between the read and the write.
            spans_mod.lock_asset(conn, job_name, self.now())
            rows = conn.execute(
                select(c.data_range_start, c.data_range_end, c.attempt, c.status).where(
                    c.job_name == job_name, c.incremental_type == TIMEWINDOW
                )
            )
            built = spans_mod.from_attempts(rows)
            spans_mod.replace(conn, job_name, built)
        return len(built)
