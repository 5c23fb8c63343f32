"""The lifecycle of a run whose job-log window is not a period of its partitions: the hourly landing's range of
offsets, the ODS upkeep's day of running. Its claim, heartbeat, fence and alerts, shared with every log-driven
asset (`materialize.py`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from dagster import Failure

from sharp_dagster.failpoints import failpoint
from sharp_dagster.joblog import FAILURE, SUCCESS, ClaimRefused, JobHandle
from sharp_dagster.joblog.heartbeat import heartbeat_interval_s
from sharp_dagster.logdriven import PROJECT_NAME, alert_attempt_failure, job_log_or_fail
from sharp_dagster.publish.failures import as_failure, error_text
from sharp_dagster.redact import scrub_text


@contextmanager
def claimed_range(
    context: Any,
    job_name: str,
    window: Any,
    incremental_type: str | None,
    application_id: str | None = None,
    partition_key: str | None = None,
) -> Iterator[JobHandle]:
    """The lifecycle of a run whose job-log window is a range, not a period (the hourly landing's Kafka offsets,
    the upkeep's day): claim (token, heartbeat) → the caller's steps, which fence with `JobLog.assert_current`
    before anything downstream can see their result → SUCCESS. Any failure records FAILURE (scrubbed), alerts once
    and reaches Dagster as a scrubbed `Failure`. Ranges have no order check and no upstream gate: the next range
    starts where the last successful one ended (`joblog/incremental.py`). The claim's partition key is
    `partition_key`, else the run's partitions (`run_label`)."""
    jl = job_log_or_fail()
    label = partition_key or run_label(context)
    try:
        handle = jl.claim(
            job_name,
            window,
            run_id=context.run_id,
            partition_key=label,
            incremental_type=incremental_type,
            project_name=PROJECT_NAME,
            application_id=application_id,
        )
    except ClaimRefused as exc:
        raise Failure(description=scrub_text(f"duplicate run refused: {exc}")) from None
    try:
        with jl.heartbeating(handle, heartbeat_interval_s()) as beat:
            failpoint("after_claim", quiet=beat.between_beats())
            yield handle
        jl.finish(handle, SUCCESS)
    except BaseException as exc:
        message = scrub_text(error_text(exc))
        jl.finish(handle, FAILURE, error=message)
        alert_attempt_failure(jl, handle, context.run_id, message)
        raise as_failure(exc, f"{job_name} [{label}]") from None


def run_label(context: Any) -> str:
    """The run's partition, or `first..last` for a range (a single-run backfill of the hourly landing: it lands
    every message up to the end offsets once, whatever the hours)."""
    keys = context.partition_key_range
    return keys.start if keys.start == keys.end else f"{keys.start}..{keys.end}"
