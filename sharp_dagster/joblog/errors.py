"""The job log's errors, and the error text it stores (scrubbed of secrets, truncated)."""

from __future__ import annotations

from datetime import datetime

from sharp_dagster.joblog.models import ERROR_MAX_CHARS
from sharp_dagster.redact import scrub_text


def error_text(error: str | None) -> str | None:
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


class NothingChanged(Exception):
    """Internal: a compare-and-set matched nothing; raised inside a transaction to roll it back."""


class StaleToken(ClaimLost):
    """`assert_current`: the period's claim is no longer held with this fencing token; do not publish."""
