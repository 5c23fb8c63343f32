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
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import traceback
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from sqlalchemy import bindparam, delete, func, insert, literal, select, update
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError

from sharp_dagster.db import make_engine
from sharp_dagster.joblog import spans as spans_mod
from sharp_dagster.joblog.migrate import ensure_schema
from sharp_dagster.joblog.models import (
    DONE_STATUSES,
    ERROR_MAX_CHARS,
    FAILURE,
    FINAL_STATUSES,
    INCREMENTAL_TYPES,
    RANGE_MAX_CHARS,
    RUNNING,
    SUCCESS,
    TIMEWINDOW,
    job_asset,
    job_claim,
    job_log,
    step_log,
)
from sharp_dagster.redact import scrub_text

log = logging.getLogger(__name__)

DEFAULT_CLAIM_TIMEOUT_S = 120.0
_SCHEDULE_START_MAX = 96


def utcnow() -> datetime:
    """Naive UTC now: the one clock of the job log."""
    return datetime.now(UTC).replace(tzinfo=None)


def claim_timeout_s() -> float:
    """`SHARP_CLAIM_TIMEOUT_S`: seconds without heartbeat after which a claim may be taken over."""
    raw = os.environ.get("SHARP_CLAIM_TIMEOUT_S", "").strip()
    if not raw:
        return DEFAULT_CLAIM_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"SHARP_CLAIM_TIMEOUT_S must be a number of seconds, got {raw!r}") from None
    if value <= 0:
        raise ValueError(f"SHARP_CLAIM_TIMEOUT_S must be positive, got {raw!r}")
    return value


MAX_HEARTBEAT_INTERVAL_S = 10.0


def heartbeat_interval_s(timeout_s: float | None = None) -> float:
    """Seconds between heartbeats: `SHARP_HEARTBEAT_INTERVAL_S`, else min(10, claim timeout / 4).

    Derived from the claim timeout (`timeout_s`, default `SHARP_CLAIM_TIMEOUT_S`) so that three beats can be lost
    before a healthy holder looks stale, whatever the timeout. An explicit interval must be below the timeout.
    """
    timeout = claim_timeout_s() if timeout_s is None else float(timeout_s)
    raw = os.environ.get("SHARP_HEARTBEAT_INTERVAL_S", "").strip()
    if not raw:
        return min(MAX_HEARTBEAT_INTERVAL_S, timeout / 4)
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"SHARP_HEARTBEAT_INTERVAL_S must be a number of seconds, got {raw!r}") from None
    if not 0 < value < timeout:
        raise ValueError(
            f"SHARP_HEARTBEAT_INTERVAL_S must be positive and below the claim timeout ({timeout:g}s), got {raw!r}"
        )
    return value


def schedule_id_for(job_name: str, range_start: str) -> str:
    """`job_name-range_start`; long (JSON) starts are hashed so the id fits its indexed column."""
    if len(range_start) > _SCHEDULE_START_MAX:
        range_start = "sha256:" + hashlib.sha256(range_start.encode()).hexdigest()[:32]
    return f"{job_name}-{range_start}"


def _fmt(ts: datetime | None) -> str:
    return "-" if ts is None else ts.strftime("%Y-%m-%d %H:%M:%S")


def _error_text(error: str | None) -> str | None:
    text = scrub_text(error)
    if text is not None and len(text) > ERROR_MAX_CHARS:
        text = text[: ERROR_MAX_CHARS - 20] + "\n... (truncated)"
    return text


class JobLogError(RuntimeError):
    """Base of the job log's errors."""


class ClaimRefused(JobLogError):
    """The period is held by another live run."""

    def __init__(self, message: str, *, holder_run_id: str | None, holder_job_id: str, since: datetime):
        super().__init__(message)
        self.holder_run_id = holder_run_id
        self.holder_job_id = holder_job_id
        self.since = since


class ClaimLost(JobLogError):
    """This run's claim was taken over (its heartbeat went stale); its result must not be recorded."""


class JobNotFound(JobLogError, LookupError):
    """No job_log row with that job_id."""


class NotRunning(JobLogError):
    """The job is not RUNNING (takeover of a finished job)."""


class StillAlive(JobLogError):
    """Takeover refused: the job's heartbeat is fresh (or it arrived while the takeover was being made)."""


class _NothingChanged(Exception):
    """Internal: a compare-and-set matched nothing; raised inside a transaction to roll it back."""


class StaleToken(ClaimLost):
    """`assert_current`: the period's claim is no longer held with this fencing token; do not publish."""


class ClaimWindow(Protocol):
    """What `JobLog.claim` needs from a period or an incremental range."""

    @property
    def range_start(self) -> str: ...

    @property
    def range_end(self) -> str | None: ...

    @property
    def period_minutes(self) -> int: ...


@dataclass
class JobHandle:
    """A claimed period: pass it to heartbeat / step / finish."""

    job_id: str
    job_name: str
    job_schedule_id: str
    run_id: str | None
    partition_key: str | None
    range_start: str
    range_end: str | None
    incremental_type: str
    period_minutes: int
    attempt: int
    started_at: datetime
    took_over_job_id: str | None = None
    # Set by the heartbeat thread when the claim was taken over; step() and finish() then raise ClaimLost.
    lost: str | None = None

    @property
    def token(self) -> int:
        """The fencing token of this claim: its attempt number, unique per period and increasing."""
        return self.attempt


@dataclass
class StepRecord:
    """Yielded by `JobLog.step`: set the counts (and optionally output lines) while the step runs."""

    step_id: str
    source_count: int | None = None
    target_count: int | None = None
    success_count: int | None = None
    failure_count: int | None = None
    output: list[str] = field(default_factory=list)
    status: str = SUCCESS

    def info(self, line: str) -> None:
        self.output.append(line)


@dataclass(frozen=True)
class Attempt:
    """The latest attempt of one period, as the planner needs it."""

    range_start: str
    attempt: int
    status: str
    run_id: str | None
    job_id: str


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


@dataclass(frozen=True)
class StepRun:
    job_id: str
    step_id: str
    status: str
    start_time: datetime
    end_time: datetime | None
    duration_ms: int | None
    source_count: int | None
    target_count: int | None
    success_count: int | None
    failure_count: int | None
    error: str | None
    output: str | None
    source_type: str | None
    target_type: str | None


@dataclass(frozen=True)
class JobRun:
    """One job_log row, with the counts of its steps (first step's source count, last step's target count,
    summed success / failure counts)."""

    job_id: str
    job_name: str
    job_period: int
    job_schedule_id: str
    range_start: str | None
    range_end: str | None
    status: str
    attempt: int
    run_id: str | None
    partition_key: str | None
    incremental_type: str | None
    project_name: str | None
    application_id: str | None
    job_start_time: datetime | None
    job_end_time: datetime | None
    heartbeat_time: datetime | None
    create_time: datetime | None
    error: str | None
    source_count: int | None = None
    target_count: int | None = None
    success_count: int | None = None
    failure_count: int | None = None
    steps: tuple[StepRun, ...] = ()
    publish_time: datetime | None = None  # when this attempt passed `assert_current` (its fencing token)

    def duration_s(self, now: datetime | None = None) -> float | None:
        if self.job_start_time is None:
            return None
        end = self.job_end_time or (now if self.status == RUNNING else None)
        return None if end is None else (end - self.job_start_time).total_seconds()

    def as_dict(self, now: datetime | None = None) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "job_name": self.job_name,
            "partition_key": self.partition_key,
            "data_range_start": self.range_start,
            "data_range_end": self.range_end,
            "status": self.status,
            "attempt": self.attempt,
            "run_id": self.run_id,
            "incremental_type": self.incremental_type,
            "application_id": self.application_id,
            "job_start_time": None if self.job_start_time is None else self.job_start_time.isoformat(),
            "job_end_time": None if self.job_end_time is None else self.job_end_time.isoformat(),
            "duration_s": self.duration_s(now),
            "source_count": self.source_count,
            "target_count": self.target_count,
            "success_count": self.success_count,
            "failure_count": self.failure_count,
            "error": self.error,
        }


def _job_run(row: Any, steps: Sequence[StepRun] = ()) -> JobRun:
    sources = [s.source_count for s in steps if s.source_count is not None]
    targets = [s.target_count for s in steps if s.target_count is not None]
    succ = [s.success_count for s in steps if s.success_count is not None]
    fail = [s.failure_count for s in steps if s.failure_count is not None]
    return JobRun(
        job_id=row.job_id,
        job_name=row.job_name,
        job_period=row.job_period,
        job_schedule_id=row.job_schedule_id,
        range_start=row.data_range_start,
        range_end=row.data_range_end,
        status=row.status,
        attempt=row.attempt,
        run_id=row.run_id,
        partition_key=row.partition_key,
        incremental_type=row.incremental_type,
        project_name=row.project_name,
        application_id=row.application_id,
        job_start_time=row.job_start_time,
        job_end_time=row.job_end_time,
        heartbeat_time=row.heartbeat_time,
        create_time=row.create_time,
        error=row.error,
        source_count=sources[0] if sources else None,
        target_count=targets[-1] if targets else None,
        success_count=sum(succ) if succ else None,
        failure_count=sum(fail) if fail else None,
        steps=tuple(steps),
        publish_time=getattr(row, "publish_time", None),
    )


class Heartbeat:
    """A daemon thread calling `JobLog.heartbeat` every `interval_s` until stopped or the claim is lost."""

    def __init__(self, job_log: JobLog, handle: JobHandle, interval_s: float):
        self._job_log = job_log
        self._handle = handle
        self._interval = interval_s
        self._stop = threading.Event()
        self._beating = threading.Lock()  # held for each beat's transaction (see `between_beats`)
        self._thread = threading.Thread(
            target=self._loop, name=f"heartbeat-{handle.job_schedule_id}", daemon=True
        )
        self.beats = 0

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                with self._beating:
                    self._job_log.heartbeat(self._handle)
                self.beats += 1
            except ClaimLost as exc:
                self._handle.lost = str(exc)
                log.error("%s", exc)
                return
            except Exception as exc:  # a database blip must not kill the run; the next beat retries
                log.warning("heartbeat of %s failed: %s", self._handle.job_schedule_id, scrub_text(str(exc)))

    def between_beats(self) -> threading.Lock:
        """A context manager that waits for a beat in flight to commit and holds the next one back.

        A fail point that freezes the process (SIGSTOP) takes it first: frozen inside a beat's transaction, the
        process would keep SQLite's write lock, and every other writer of the job log would wait on it.
        """
        return self._beating

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=max(5.0, self._interval * 2))


class JobLog:
    """The job log of one database. `engine_or_url`: an Engine, a URL, or None for `SHARP_LOG_DB_URL`."""

    def __init__(
        self,
        engine_or_url: Engine | str | None = None,
        *,
        clock: Callable[[], datetime] | None = None,
    ):
        engine = engine_or_url if isinstance(engine_or_url, Engine) else make_engine(engine_or_url)
        self.engine: Engine = ensure_schema(engine)
        self._clock = clock or utcnow
        self._assets_known: set[str] = set()
        # Called with the claim row a takeover read and judged stale, just before its compare-and-set (claim and
        # `takeover`). Tests put a heartbeat here to interleave "heartbeat arrives during a takeover" exactly.
        self.takeover_hook: Callable[[Any], None] | None = None

    def now(self) -> datetime:
        return self._clock()

    # ------------------------------------------------------------------ claim / heartbeat / finish

    def claim(
        self,
        job_name: str,
        window: ClaimWindow,
        run_id: str | None,
        partition_key: str | None = None,
        incremental_type: str | None = None,
        project_name: str | None = None,
        *,
        stale_after_s: float | None = None,
        application_id: str | None = None,
        current_file: str | None = None,
    ) -> JobHandle:
        """Claim one period of `job_name` for `run_id` and record it RUNNING (attempt = previous + 1).

        Raises `ClaimRefused` (naming the holder's run id and since when) while another run holds the period with
        a fresh heartbeat; a holder silent for `stale_after_s` is taken over and its row marked FAILURE.
        """
        if not job_name or len(job_name) > 128:
            raise ValueError(f"job_name must be 1..128 characters, got {job_name!r}")
        range_start = window.range_start
        range_end = window.range_end
        for label, value in (("data_range_start", range_start), ("data_range_end", range_end)):
            if value is not None and len(value) > RANGE_MAX_CHARS:
                raise ValueError(
                    f"{job_name}: {label} is {len(value)} characters, the limit is {RANGE_MAX_CHARS}"
                )
        inc_type = incremental_type or getattr(window, "incremental_type", None) or TIMEWINDOW
        if inc_type not in INCREMENTAL_TYPES:
            raise ValueError(f"incremental_type must be one of {INCREMENTAL_TYPES}, got {inc_type!r}")
        partition_key = partition_key or getattr(window, "partition_key", None)
        stale = claim_timeout_s() if stale_after_s is None else float(stale_after_s)
        schedule_id = schedule_id_for(job_name, range_start)
        self._ensure_asset(job_name)

        def new_handle(job_id: str, attempt: int, now: datetime, took_over: str | None = None) -> JobHandle:
            return JobHandle(
                job_id=job_id,
                job_name=job_name,
                job_schedule_id=schedule_id,
                run_id=run_id,
                partition_key=partition_key,
                range_start=range_start,
                range_end=range_end,
                incremental_type=inc_type,
                period_minutes=int(window.period_minutes),
                attempt=attempt,
                started_at=now,
                took_over_job_id=took_over,
            )

        def record(conn: Connection, job_id: str, now: datetime) -> int:
            attempt = (
                conn.execute(
                    select(func.max(job_log.c.attempt)).where(job_log.c.job_schedule_id == schedule_id)
                ).scalar()
                or 0
            ) + 1
            conn.execute(
                insert(job_log).values(
                    job_id=job_id,
                    job_name=job_name,
                    job_period=int(window.period_minutes),
                    job_schedule_id=schedule_id,
                    data_range_start=range_start,
                    data_range_end=range_end,
                    job_start_time=now,
                    status=RUNNING,
                    create_time=now,
                    last_update_time=now,
                    incremental_type=inc_type,
                    current_file=current_file,
                    application_id=application_id,
                    project_name=project_name,
                    run_id=run_id,
                    partition_key=partition_key,
                    heartbeat_time=now,
                    attempt=attempt,
                )
            )
            if inc_type == TIMEWINDOW and range_end is not None:
                spans_mod.remove_period(conn, job_name, range_start, range_end, now)
            return attempt

        for _ in range(10):
            now = self.now()
            job_id = str(uuid.uuid4())
            try:
                with self.engine.begin() as conn:
                    conn.execute(
                        insert(job_claim).values(
                            job_schedule_id=schedule_id,
                            job_id=job_id,
                            run_id=run_id,
                            claimed_at=now,
                            heartbeat_time=now,
                        )
                    )
                    attempt = record(conn, job_id, now)
                return new_handle(job_id, attempt, now)
            except IntegrityError:
                pass  # the period is held: look at the holder below

            holder = self._claim_row(schedule_id)
            if holder is None:
                continue  # the holder finished in between: claim again
            now = self.now()
            age = (now - holder.heartbeat_time).total_seconds()
            if age <= stale:
                raise ClaimRefused(
                    f"{job_name} period {partition_key or range_start} is held by run {holder.run_id} "
                    f"(job {holder.job_id}) since {_fmt(holder.claimed_at)} UTC; last heartbeat "
                    f"{_fmt(holder.heartbeat_time)} UTC ({age:.0f}s ago, stale after {stale:g}s)",
                    holder_run_id=holder.run_id,
                    holder_job_id=holder.job_id,
                    since=holder.claimed_at,
                )
            job_id = str(uuid.uuid4())
            reason = (
                f"heartbeat lost since {_fmt(holder.heartbeat_time)} UTC, taken over by run {run_id} "
                f"(job {job_id}) at {_fmt(now)} UTC"
            )
            if self.takeover_hook is not None:
                self.takeover_hook(holder)
            with self.engine.begin() as conn:
                # Compare-and-set on what was judged stale: the holder's job id AND the heartbeat time read above.
                # A heartbeat that landed since then changed heartbeat_time, so this matches no row.
                taken = conn.execute(
                    update(job_claim)
                    .where(
                        job_claim.c.job_schedule_id == schedule_id,
                        job_claim.c.job_id == holder.job_id,
                        job_claim.c.heartbeat_time == holder.heartbeat_time,
                    )
                    .values(job_id=job_id, run_id=run_id, claimed_at=now, heartbeat_time=now)
                ).rowcount
                if taken == 1:
                    conn.execute(
                        update(job_log)
                        .where(job_log.c.job_id == holder.job_id, job_log.c.status == RUNNING)
                        .values(status=FAILURE, error=reason, job_end_time=now, last_update_time=now)
                    )
                    attempt = record(conn, job_id, now)
            if taken == 1:
                log.warning("%s: %s", schedule_id, reason)
                return new_handle(job_id, attempt, now, took_over=holder.job_id)
            # The holder sent a heartbeat, finished, or someone else took over: look again (a live holder now
            # refuses this claim with a fresh heartbeat).
        raise JobLogError(f"could not claim {schedule_id}: it changed hands ten times while trying")

    def _claim_row(self, schedule_id: str) -> Any:
        with self.engine.connect() as conn:
            return conn.execute(select(job_claim).where(job_claim.c.job_schedule_id == schedule_id)).first()

    def inspect_claim(self, job_schedule_id: str) -> Any:
        """The claim row of a period (job_id, run_id, claimed_at, heartbeat_time), or None when it is free."""
        return self._claim_row(job_schedule_id)

    def assert_current(self, handle: JobHandle, token: int | None = None) -> datetime:
        """Check that the period is still claimed with fencing token `token` (default: the handle's) and record
        the publish, in one transaction; returns the publish time. Call it right before the table commit.

        Raises `StaleToken` (a `ClaimLost`), changing nothing, when the claim was taken over, released, or is held
        with another token. The check is a write (the claim's heartbeat is refreshed, only where the holder's
        attempt equals the token), so the claim row stays locked until the publish is recorded: a concurrent
        takeover either commits first (this check then fails) or waits and then finds a fresh heartbeat.
        """
        token = handle.token if token is None else int(token)
        now = self.now()
        holder_with_token = (
            select(job_log.c.job_id)
            .where(job_log.c.job_schedule_id == handle.job_schedule_id, job_log.c.attempt == token)
            .scalar_subquery()
        )
        with self.engine.begin() as conn:
            held = conn.execute(
                update(job_claim)
                .where(
                    job_claim.c.job_schedule_id == handle.job_schedule_id,
                    job_claim.c.job_id == handle.job_id,
                    job_claim.c.job_id == holder_with_token,
                )
                .values(heartbeat_time=now)
            ).rowcount
            if held == 1:
                conn.execute(
                    update(job_log)
                    .where(job_log.c.job_id == handle.job_id, job_log.c.status == RUNNING)
                    .values(publish_time=now, heartbeat_time=now, last_update_time=now)
                )
        if held != 1:
            lost = self._lost_message(handle)
            handle.lost = handle.lost or lost
            raise StaleToken(f"{lost}; publishing with fencing token {token} refused")
        return now

    def heartbeat(self, handle: JobHandle) -> None:
        """Refresh the claim; raises `ClaimLost` when another run has taken it over."""
        now = self.now()
        with self.engine.begin() as conn:
            kept = conn.execute(
                update(job_claim)
                .where(
                    job_claim.c.job_schedule_id == handle.job_schedule_id, job_claim.c.job_id == handle.job_id
                )
                .values(heartbeat_time=now)
            ).rowcount
            if kept == 1:
                conn.execute(
                    update(job_log)
                    .where(job_log.c.job_id == handle.job_id)
                    .values(heartbeat_time=now, last_update_time=now)
                )
        if kept != 1:
            handle.lost = self._lost_message(handle)
            raise ClaimLost(handle.lost)

    def _lost_message(self, handle: JobHandle) -> str:
        holder = self._claim_row(handle.job_schedule_id)
        row = self.get(handle.job_id)
        why = f": {row.error}" if row is not None and row.error else ""
        now_held = f"; now held by run {holder.run_id}" if holder is not None else ""
        return f"{handle.job_name} period {handle.partition_key or handle.range_start}: run {handle.run_id} lost its claim{why}{now_held}"

    @contextmanager
    def heartbeating(self, handle: JobHandle, interval_s: float | None = None) -> Iterator[Heartbeat]:
        """Send heartbeats from a background thread while the block runs.

        `interval_s` defaults to `heartbeat_interval_s()` (from the claim timeout).
        """
        if interval_s is None:
            interval_s = heartbeat_interval_s()
        beat = Heartbeat(self, handle, interval_s).start()
        try:
            yield beat
        finally:
            beat.stop()

    def finish(self, handle: JobHandle, status: str, error: str | None = None) -> None:
        """Write the final status and release the claim, in one transaction.

        Raises `ClaimLost` (recording nothing) when the claim was taken over, except for a FAILURE, whose row
        the taker already marked FAILURE: that is only logged.
        """
        if status not in FINAL_STATUSES:
            raise ValueError(f"finish status must be one of {sorted(FINAL_STATUSES)}, got {status!r}")
        self._ensure_asset(handle.job_name)
        now = self.now()
        with self.engine.begin() as conn:
            released = conn.execute(
                delete(job_claim).where(
                    job_claim.c.job_schedule_id == handle.job_schedule_id, job_claim.c.job_id == handle.job_id
                )
            ).rowcount
            if released == 1:
                conn.execute(
                    update(job_log)
                    .where(job_log.c.job_id == handle.job_id)
                    .values(status=status, job_end_time=now, last_update_time=now, error=_error_text(error))
                )
                if status in DONE_STATUSES and handle.incremental_type == TIMEWINDOW and handle.range_end:
                    spans_mod.add_period(conn, handle.job_name, handle.range_start, handle.range_end, now)
        if released != 1:
            handle.lost = handle.lost or self._lost_message(handle)
            if status == FAILURE:
                log.warning("%s (its failure was not recorded: %s)", handle.lost, scrub_text(error))
                return
            raise ClaimLost(handle.lost)

    @contextmanager
    def run(
        self,
        job_name: str,
        window: ClaimWindow,
        run_id: str | None,
        partition_key: str | None = None,
        incremental_type: str | None = None,
        project_name: str | None = None,
        *,
        stale_after_s: float | None = None,
        heartbeat_interval_s: float | None = None,
    ) -> Iterator[JobHandle]:
        """Claim, send heartbeats while the block runs, then finish: SUCCESS, or FAILURE with the traceback when
        the block raises (re-raised). `ClaimRefused` comes out of the `with` before the block runs."""
        handle = self.claim(
            job_name,
            window,
            run_id,
            partition_key,
            incremental_type,
            project_name,
            stale_after_s=stale_after_s,
        )
        with self.heartbeating(handle, heartbeat_interval_s):
            try:
                yield handle
            except BaseException as exc:
                self.finish(handle, FAILURE, "".join(traceback.format_exception(exc)).strip())
                raise
        self.finish(handle, SUCCESS)

    def takeover(
        self,
        job_id: str,
        reason: str,
        *,
        force: bool = False,
        stale_after_s: float | None = None,
    ) -> JobRun:
        """End a stale RUNNING job: FAILURE with `reason`, its claim released. Returns the updated row.

        Refuses (`StillAlive`) a job whose heartbeat is younger than the claim timeout unless `force`.
        """
        row = self.get(job_id)
        if row is None:
            raise JobNotFound(f"no job with job_id {job_id!r} in the job log")
        if row.status != RUNNING:
            raise NotRunning(
                f"job {job_id} ({row.job_name} {row.partition_key or row.range_start}) is {row.status}, not RUNNING"
            )
        holder = self._claim_row(row.job_schedule_id)
        beat = holder.heartbeat_time if holder is not None and holder.job_id == job_id else row.heartbeat_time
        stale = claim_timeout_s() if stale_after_s is None else float(stale_after_s)
        now = self.now()
        if not force and beat is not None and (now - beat).total_seconds() <= stale:
            raise StillAlive(
                f"job {job_id} (run {row.run_id}) sent a heartbeat {(now - beat).total_seconds():.0f}s ago "
                f"(stale after {stale:g}s); force the takeover if that run is really gone"
            )
        holds = holder is not None and holder.job_id == job_id
        if self.takeover_hook is not None:
            self.takeover_hook(holder if holds else row)
        ended = 0
        try:
            self._end_stale(row, holder if holds else None, force, reason, now)
            ended = 1
        except _NothingChanged:
            pass
        if ended != 1:
            latest = self.get(job_id)
            if latest is not None and latest.status == RUNNING:
                raise StillAlive(
                    f"job {job_id} (run {row.run_id}) sent a heartbeat while it was being taken over; "
                    "nothing was changed"
                )
            raise NotRunning(f"job {job_id} finished while it was being taken over")
        result = self.get(job_id)
        assert result is not None
        return result

    def _end_stale(self, row: JobRun, holder: Any, force: bool, reason: str, now: datetime) -> None:
        """`takeover`'s transaction: release the claim and end the row, or raise `_NothingChanged` (rolled back).

        Compare-and-set on the heartbeat judged stale (unless forced): a heartbeat that arrived since then makes
        the DELETE match nothing, and the job is left running and claimed.
        """
        with self.engine.begin() as conn:
            if holder is not None:
                where = [job_claim.c.job_schedule_id == row.job_schedule_id, job_claim.c.job_id == row.job_id]
                if not force:
                    where.append(job_claim.c.heartbeat_time == holder.heartbeat_time)
                if conn.execute(delete(job_claim).where(*where)).rowcount != 1:
                    raise _NothingChanged
            where = [job_log.c.job_id == row.job_id, job_log.c.status == RUNNING]
            if not force and holder is None:
                where.append(
                    job_log.c.heartbeat_time.is_(None)
                    if row.heartbeat_time is None
                    else job_log.c.heartbeat_time == row.heartbeat_time
                )
            ended = conn.execute(
                update(job_log)
                .where(*where)
                .values(status=FAILURE, error=_error_text(reason), job_end_time=now, last_update_time=now)
            ).rowcount
            if ended != 1:
                raise _NothingChanged  # rolls the claim's DELETE back too

    # ------------------------------------------------------------------ steps and attributes

    @contextmanager
    def step(
        self,
        handle: JobHandle,
        step_id: str,
        source_type: str | None = None,
        target_type: str | None = None,
    ) -> Iterator[StepRecord]:
        """Record one step: RUNNING at entry, then SUCCESS (or `record.status`) with counts and duration, or
        FAILURE with the error text when the block raises (the exception is re-raised)."""
        if handle.lost:
            raise ClaimLost(handle.lost)
        record = StepRecord(step_id)
        start = self.now()
        try:
            with self.engine.begin() as conn:
                conn.execute(
                    insert(step_log).values(
                        job_id=handle.job_id,
                        step_id=step_id,
                        status=RUNNING,
                        start_time=start,
                        source_type=source_type,
                        target_type=target_type,
                    )
                )
        except IntegrityError:
            raise JobLogError(f"step {step_id!r} is already recorded for job {handle.job_id}") from None
        status, error = SUCCESS, None
        try:
            yield record
            status = record.status
        except BaseException as exc:
            status = FAILURE
            error = "".join(traceback.format_exception(exc)).strip()
            raise
        finally:
            end = self.now()
            with self.engine.begin() as conn:
                conn.execute(
                    update(step_log)
                    .where(step_log.c.job_id == handle.job_id, step_log.c.step_id == step_id)
                    .values(
                        status=status,
                        end_time=end,
                        duration=int((end - start).total_seconds() * 1000),
                        output=scrub_text("\n".join(record.output)) if record.output else None,
                        source_count=record.source_count,
                        target_count=record.target_count,
                        success_count=record.success_count,
                        failure_count=record.failure_count,
                        error=_error_text(error),
                    )
                )

    def _set(self, handle: JobHandle, **values: Any) -> None:
        values["last_update_time"] = self.now()
        with self.engine.begin() as conn:
            conn.execute(update(job_log).where(job_log.c.job_id == handle.job_id).values(**values))

    def set_application_id(self, handle: JobHandle, application_id: str) -> None:
        """Record the Spark application id of the run."""
        self._set(handle, application_id=application_id)

    def set_current_file(self, handle: JobHandle, current_file: str) -> None:
        """Record the file a file-sourced run is reading."""
        self._set(handle, current_file=current_file)

    def set_range_end(self, handle: JobHandle, end: str) -> None:
        """Write the real end of an auto-increment or Kafka run once the read is done."""
        if len(end) > RANGE_MAX_CHARS:
            raise ValueError(
                f"{handle.job_name}: data_range_end is {len(end)} characters, limit {RANGE_MAX_CHARS}"
            )
        if handle.incremental_type == TIMEWINDOW:
            raise ValueError(
                f"{handle.job_name}: a time-window run's end is its period end, it cannot be set"
            )
        self._set(handle, data_range_end=end)
        handle.range_end = end

    # ------------------------------------------------------------------ success spans

    def _ensure_asset(self, job_name: str) -> None:
        if job_name in self._assets_known:
            return
        try:
            with self.engine.begin() as conn:
                conn.execute(insert(job_asset).values(job_name=job_name, version=0, updated_at=self.now()))
        except IntegrityError:
            pass
        self._assets_known.add(job_name)

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

    # ------------------------------------------------------------------ queries

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
        return None if row is None else _job_run(row)

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
            return [_job_run(r) for r in conn.execute(stmt)]

    def get(self, job_id: str) -> JobRun | None:
        """One job_log row with its steps."""
        with self.engine.connect() as conn:
            row = conn.execute(select(job_log).where(job_log.c.job_id == job_id)).first()
            if row is None:
                return None
            return _job_run(row, self._steps(conn, [job_id]).get(job_id, []))

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
        return [_job_run(r, steps.get(r.job_id, [])) for r in rows]

    def running(self, job_name: str | None = None) -> list[JobRun]:
        """Every RUNNING row (optionally of one asset), oldest first."""
        c = job_log.c
        stmt = select(job_log).where(c.status == RUNNING).order_by(c.create_time)
        if job_name is not None:
            stmt = stmt.where(c.job_name == job_name)
        with self.engine.connect() as conn:
            return [_job_run(r) for r in conn.execute(stmt)]

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
