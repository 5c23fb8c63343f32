"""Steps of a claimed run and the attributes of its job_log row (`JobLog` inherits them)."""

from __future__ import annotations

import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import insert, update
from sqlalchemy.exc import IntegrityError

from sharp_dagster.joblog.base import JobLogBase
from sharp_dagster.joblog.errors import ClaimLost, JobLogError, error_text
from sharp_dagster.joblog.models import (
    FAILURE,
    RANGE_MAX_CHARS,
    RUNNING,
    SUCCESS,
    TIMEWINDOW,
    job_log,
    step_log,
)
from sharp_dagster.joblog.records import JobHandle, StepRecord
from sharp_dagster.redact import scrub_text


class StepsMixin(JobLogBase):
    """`step` records one step of a run; `set_*` write attributes of its job_log row."""

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
                        error=error_text(error),
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
