"""The log-driven execution engine: the job log outside Dagster (claims, heartbeats, steps, planning).

Plain Python and SQLAlchemy, no Dagster import. `store.JobLog` records runs, `planner` computes what is due and
in which order, `incremental` holds the three range modes, `migrate.ensure_schema` creates the tables.
"""

from sharp_dagster.joblog.models import FAILURE, RUNNING, SKIPPED, SUCCESS
from sharp_dagster.joblog.planner import (
    OutOfOrder,
    Period,
    PeriodSpec,
    UpstreamCheck,
    check_ordered,
    check_upstream_done,
    pending_queue,
    refresh_periods,
)
from sharp_dagster.joblog.store import ClaimLost, ClaimRefused, JobHandle, JobLog, JobLogError, StepRecord

__all__ = [
    "FAILURE",
    "RUNNING",
    "SKIPPED",
    "SUCCESS",
    "ClaimLost",
    "ClaimRefused",
    "JobHandle",
    "JobLog",
    "JobLogError",
    "OutOfOrder",
    "Period",
    "PeriodSpec",
    "StepRecord",
    "UpstreamCheck",
    "check_ordered",
    "check_upstream_done",
    "pending_queue",
    "refresh_periods",
]
