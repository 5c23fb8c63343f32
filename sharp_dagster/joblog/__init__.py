"""The log-driven execution engine: the job log outside Dagster (claims, heartbeats, steps, planning).

Plain Python and SQLAlchemy, no Dagster import. `store.JobLog` records runs (split into `claims`, `fencing`,
`takeover`, `steps`, `queries`), `planner` computes what is due and in which order, `incremental` holds the three range modes, `migrate.ensure_schema` creates the tables.

Names are re-exported lazily so that importing a submodule (e.g. the `sharp-dagster log` CLI) does not import
SQLAlchemy and Alembic before a command needs them.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for type checkers and IDEs; at run time __getattr__ below resolves the names
    from sharp_dagster.joblog.errors import ClaimLost, ClaimRefused, JobLogError
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
    from sharp_dagster.joblog.records import JobHandle, StepRecord
    from sharp_dagster.joblog.store import JobLog

_EXPORTS = {
    "FAILURE": "models",
    "RUNNING": "models",
    "SKIPPED": "models",
    "SUCCESS": "models",
    "OutOfOrder": "planner",
    "Period": "planner",
    "PeriodSpec": "planner",
    "UpstreamCheck": "planner",
    "check_ordered": "planner",
    "check_upstream_done": "planner",
    "pending_queue": "planner",
    "refresh_periods": "planner",
    "ClaimLost": "errors",
    "ClaimRefused": "errors",
    "JobHandle": "records",
    "JobLog": "store",
    "JobLogError": "errors",
    "StepRecord": "records",
}

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


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'sharp_dagster.joblog' has no attribute {name!r}")
    return getattr(import_module(f"sharp_dagster.joblog.{module}"), name)
