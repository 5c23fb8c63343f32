"""What the job log hands out: claim handles, step records, and the rows its queries return."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from sharp_dagster.joblog.models import RUNNING, SUCCESS

_SCHEDULE_START_MAX = 96


def schedule_id_for(job_name: str, range_start: str) -> str:
    """`job_name-range_start`; long (JSON) starts are hashed so the id fits its indexed column."""
    if len(range_start) > _SCHEDULE_START_MAX:
        range_start = "sha256:" + hashlib.sha256(range_start.encode()).hexdigest()[:32]
    return f"{job_name}-{range_start}"


def fmt_time(ts: datetime | None) -> str:
    return "-" if ts is None else ts.strftime("%Y-%m-%d %H:%M:%S")


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


def job_run(row: Any, steps: Sequence[StepRun] = ()) -> JobRun:
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
