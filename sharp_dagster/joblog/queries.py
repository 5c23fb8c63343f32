"""The job log's queries: runs, steps, latest attempts, success spans (`JobLog` inherits them)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import bindparam, literal, select
from sqlalchemy.engine import Connection

from sharp_dagster.joblog import spans as spans_mod
from sharp_dagster.joblog.base import JobLogBase
from sharp_dagster.joblog.models import DONE_STATUSES, RUNNING, job_log, step_log
from sharp_dagster.joblog.records import Attempt, JobRun, StepRun, job_run

_STARTS_PER_QUERY = 500
_ATTEMPT_COLUMNS = (
    job_log.c.data_range_start,
    job_log.c.attempt,
    job_log.c.status,
    job_log.c.run_id,
    job_log.c.job_id,
)
_LATEST_IN = select(*_ATTEMPT_COLUMNS).where(
    job_log.c.job_name == bindparam("job_name"),
    job_log.c.data_range_start.in_(bindparam("starts", expanding=True)),
)
_LATEST_RANGE = select(*_ATTEMPT_COLUMNS).where(
    job_log.c.job_name == bindparam("job_name"),
    job_log.c.data_range_start >= bindparam("a"),
    job_log.c.data_range_start < bindparam("b"),
)


class QueriesMixin(JobLogBase):
    """Read-only queries of the job log."""

    @contextmanager
    def reading(self) -> Iterator[Connection]:
        """One connection for several queries (the planner's): one pool checkout, one pre-ping."""
        with self.engine.connect() as conn:
            yield conn

    @contextmanager
    def _reader(self, conn: Connection | None) -> Iterator[Connection]:
        if conn is not None:
            yield conn
        else:
            with self.engine.connect() as own:
                yield own

    def uncovered(
        self, job_name: str, lo: str, hi: str, conn: Connection | None = None
    ) -> list[tuple[str, str]]:
        """The parts of [lo, hi) not covered by the asset's success spans, oldest first."""
        with self._reader(conn) as c:
            return spans_mod.gaps(c, job_name, lo, hi)

    def spans(self, job_name: str) -> list[tuple[str, str]]:
        """All success spans of an asset (diagnostics and tests)."""
        with self.engine.connect() as conn:
            return spans_mod.all_spans(conn, job_name)

    def latest_attempts(
        self,
        job_name: str,
        starts: Sequence[str] = (),
        ranges: Sequence[tuple[str, str]] = (),
        conn: Connection | None = None,
    ) -> dict[str, Attempt]:
        """The latest attempt of every period of `job_name` whose range start is one of `starts` or lies in one
        of `ranges` ([start, end) strings).

        Exact starts go as IN lists (500 per statement): every database estimates those well (PostgreSQL with
        ranges joined from an array guessed 100,000 rows per range and paid for JIT compilation). Ranges are for
        long stretches of periods and go one plain range scan each.
        """
        latest: dict[str, Attempt] = {}

        def keep(rows: Any) -> None:
            for start, attempt, status, run_id, job_id in rows:
                seen = latest.get(start)
                if seen is None or attempt > seen.attempt:
                    latest[start] = Attempt(start, attempt, status, run_id, job_id)

        with self._reader(conn) as c:
            for i in range(0, len(starts), _STARTS_PER_QUERY):
                keep(
                    c.execute(
                        _LATEST_IN, {"job_name": job_name, "starts": list(starts[i : i + _STARTS_PER_QUERY])}
                    )
                )
            for a, b in ranges:
                keep(c.execute(_LATEST_RANGE, {"job_name": job_name, "a": a, "b": b}))
        return latest

    def last_success(
        self, job_name: str, *, order_by_range: bool = True, incremental_type: str | None = None
    ) -> JobRun | None:
        """The newest done (SUCCESS / SKIPPED) run of an asset that has a `data_range_end`.

        Ordered by `data_range_end` (fixed-width ranges: time windows, auto-increment ids) or, with
        `order_by_range=False`, by end time (Kafka JSON ranges, which are not orderable as text).
        """
        c = job_log.c
        order = (c.data_range_end.desc(), c.attempt.desc()) if order_by_range else (c.job_end_time.desc(),)
        where = [c.job_name == job_name, c.status.in_(sorted(DONE_STATUSES)), c.data_range_end.is_not(None)]
        if incremental_type is not None:
            where.append(c.incremental_type == incremental_type)
        with self.engine.connect() as conn:
            row = conn.execute(select(job_log).where(*where).order_by(*order).limit(1)).first()
        return None if row is None else job_run(row)

    def recent_successes(
        self, job_name: str, incremental_type: str | None = None, limit: int = 20
    ) -> list[JobRun]:
        """The newest done runs with a `data_range_end`, by end time, newest first."""
        c = job_log.c
        where = [c.job_name == job_name, c.status.in_(sorted(DONE_STATUSES)), c.data_range_end.is_not(None)]
        if incremental_type is not None:
            where.append(c.incremental_type == incremental_type)
        stmt = select(job_log).where(*where).order_by(c.job_end_time.desc()).limit(max(1, int(limit)))
        with self.engine.connect() as conn:
            return [job_run(r) for r in conn.execute(stmt)]

    def get(self, job_id: str) -> JobRun | None:
        """One job_log row with its steps."""
        with self.engine.connect() as conn:
            row = conn.execute(select(job_log).where(job_log.c.job_id == job_id)).first()
            if row is None:
                return None
            return job_run(row, self._steps(conn, [job_id]).get(job_id, []))

    def steps(self, job_id: str) -> list[StepRun]:
        with self.engine.connect() as conn:
            return self._steps(conn, [job_id]).get(job_id, [])

    @staticmethod
    def _steps(conn: Connection, job_ids: Sequence[str]) -> dict[str, list[StepRun]]:
        out: dict[str, list[StepRun]] = {}
        if not job_ids:
            return out
        c = step_log.c
        rows = conn.execute(
            select(step_log).where(c.job_id.in_(list(job_ids))).order_by(c.start_time, c.step_id)
        )
        for r in rows:
            out.setdefault(r.job_id, []).append(
                StepRun(
                    job_id=r.job_id,
                    step_id=r.step_id,
                    status=r.status,
                    start_time=r.start_time,
                    end_time=r.end_time,
                    duration_ms=r.duration,
                    source_count=r.source_count,
                    target_count=r.target_count,
                    success_count=r.success_count,
                    failure_count=r.failure_count,
                    error=r.error,
                    output=r.output,
                    source_type=r.source_type,
                    target_type=r.target_type,
                )
            )
        return out

    def recent(self, job_name: str | None = None, limit: int = 20) -> list[JobRun]:
        """The newest job_log rows (attempts), newest first, optionally of one asset, with step counts."""
        c = job_log.c
        stmt = select(job_log).order_by(c.create_time.desc(), c.attempt.desc()).limit(max(1, int(limit)))
        if job_name is not None:
            stmt = stmt.where(c.job_name == job_name)
        with self.engine.connect() as conn:
            rows = list(conn.execute(stmt))
            steps = self._steps(conn, [r.job_id for r in rows])
        return [job_run(r, steps.get(r.job_id, [])) for r in rows]

    def running(self, job_name: str | None = None) -> list[JobRun]:
        """Every RUNNING row (optionally of one asset), oldest first."""
        c = job_log.c
        stmt = select(job_log).where(c.status == RUNNING).order_by(c.create_time)
        if job_name is not None:
            stmt = stmt.where(c.job_name == job_name)
        with self.engine.connect() as conn:
            return [job_run(r) for r in conn.execute(stmt)]

    def job_names(self) -> list[str]:
        """Assets with at least one row."""
        with self.engine.connect() as conn:
            return [
                r[0] for r in conn.execute(select(job_log.c.job_name).distinct().order_by(job_log.c.job_name))
            ]

    def has_rows(self, job_name: str) -> bool:
        with self.engine.connect() as conn:
            return (
                conn.execute(select(literal(1)).where(job_log.c.job_name == job_name).limit(1)).first()
                is not None
            )
