"""What every log-driven run shares in Dagster: the process's `JobLog` and the failure alert of a claimed attempt.
(The asset's job-log view, `LogDrivenAsset`, is the planner's; the project's set of them is
`sharp_dagster.warehouse.layout`.) The lifecycle itself (check, claim, gate, stage, rules, fence, publish) is
`sharp_dagster.publish`.
"""

from __future__ import annotations

import logging
import threading

from dagster import Failure

from sharp_dagster.alerts import AlertSink
from sharp_dagster.db import BadDatabaseUrl, DatabaseUnavailable
from sharp_dagster.joblog import JobHandle, JobLog
from sharp_dagster.redact import scrub_text
from sharp_dagster.settings import Settings

log = logging.getLogger("sharp_dagster.logdriven")

PROJECT_NAME = "sharp_dagster"
REFRESH_TAG = "sharp/refresh"


_JOB_LOGS: dict[str, JobLog] = {}
_LOCK = threading.Lock()


def job_log(url: str | None = None) -> JobLog:
    """The process's JobLog for `url` (default `SHARP_LOG_DB_URL`); schema created/migrated on first use."""
    url = url or Settings.from_env().log_db_url
    with _LOCK:
        if url not in _JOB_LOGS:
            _JOB_LOGS[url] = JobLog(url)
        return _JOB_LOGS[url]


def job_log_or_fail() -> JobLog:
    try:
        return job_log()
    except (DatabaseUnavailable, BadDatabaseUrl) as exc:
        raise Failure(description=scrub_text(f"job log unavailable, nothing was written: {exc}")) from None


def alert_attempt_failure(jl: JobLog, handle: JobHandle, run_id: str | None, message: str) -> None:
    """The failure alert of one claimed attempt (any log-driven asset, the landing included), once per attempt."""
    try:
        # A period's attempt number names the attempt; an offset range (the landing) is told apart by its job id.
        which = handle.attempt if handle.incremental_type == "timewindow" else handle.job_id
        sink = AlertSink.from_env(engine=jl.engine)
        sink.send(
            "run_failure",
            dedup_key=f"run:{handle.job_name}:{handle.partition_key}:{which}",
            title=f"{handle.job_name} [{handle.partition_key}] failed",
            details={
                "asset": handle.job_name,
                "partition": handle.partition_key,
                "run_id": run_id,
                "job_id": handle.job_id,
                "attempt": handle.attempt,
                "error": message[:2000],
            },
        )
    except Exception:  # alerting must never hide the original failure
        log.exception("could not send the failure alert of %s", handle.job_name)
