"""Log-driven execution of one asset partition in Dagster: the glue between a materialization and the job log.

Every materialization of a log-driven asset goes through a `PartitionRun`:

1. the job-log database is reached (or the run fails before any data is written, the URL shown without password);
2. ordered semantics: an earlier partition of the asset (from its start) that is not SUCCESS in the job log
   stops the run, naming that partition and its status (`planner.check_ordered`);
3. the period is claimed atomically (`JobLog.claim`: a second run of the same period is refused, naming the
   holder), and a heartbeat thread keeps the claim alive;
4. the upstream gate (`checkdone` step, `planner.require_upstreams_done`): every upstream period the partition
   reads (same grain or not, `@lookback` included) must have a SUCCESS latest attempt, else the run is refused
   before anything is read or written and the refusal is recorded as this period's FAILURE;
5. steps `read`, `transform`, `write`, `checks` are recorded in step_log with their counts;
6. `stage` writes the partition where no reader sees it; the data-quality rules run on the staged rows
   (`assets/quality.py`); `publish_staged` swaps it in and marks the job SUCCESS. Any failure marks it FAILURE
   with the error and alerts; the previous partition stays in place.

The asset body and the IO manager run in the same step process, so the IO manager finds the run's
`PartitionRun` in a process-local registry keyed by (Dagster run id, asset, partition).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from dagster import Failure
from pyspark.sql import DataFrame

from sharp_dagster.db import BadDatabaseUrl, DatabaseUnavailable
from sharp_dagster.joblog import (
    FAILURE,
    SUCCESS,
    ClaimRefused,
    JobHandle,
    JobLog,
    OutOfOrder,
    Period,
    PeriodSpec,
    check_ordered,
)
from sharp_dagster.joblog.planner import UpstreamNotDone, UpstreamRead, require_upstreams_done
from sharp_dagster.joblog.redact import scrub_text
from sharp_dagster.joblog.store import Heartbeat, heartbeat_interval_s
from sharp_dagster.lineage import openlineage
from sharp_dagster.settings import Settings
from sharp_dagster.spark.tables import StagedPartition, TableRef, TableStore

log = logging.getLogger("sharp_dagster.logdriven")

PROJECT_NAME = "sharp_dagster"
REFRESH_TAG = "sharp/refresh"


@dataclass(frozen=True)
class LogDrivenAsset:
    """What the job log needs to know about an asset: its name (`layer/table`), periods and upstreams."""

    job_name: str
    spec: PeriodSpec
    # Every log-driven upstream the asset reads (any grain), with its lookback: the upstream gate checks them.
    upstream: dict[str, UpstreamRead] = field(default_factory=dict)
    incremental_type: str = "timewindow"
    # Why a period cannot start yet (e.g. its binlog has not fully landed), or None when it can.
    ready: Callable[[Any], str | None] | None = field(default=None, compare=False)


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


_ACTIVE: dict[tuple[str, str, str], PartitionRun] = {}


def active_run(run_id: str, job_name: str, partition_key: str) -> PartitionRun | None:
    return _ACTIVE.get((run_id, job_name, partition_key))


class PartitionRun:
    """One claimed period of one asset, from claim to SUCCESS/FAILURE."""

    def __init__(self, jl: JobLog, asset: LogDrivenAsset, handle: JobHandle, run_id: str, context: Any):
        self.job_log = jl
        self.asset = asset
        self.handle = handle
        self.run_id = run_id
        self.context = context
        self.source_count: int | None = None
        self.finished = False
        self.lineage_run_id = openlineage.new_run_id()  # the OpenLineage run id of this attempt
        self.period: tuple[datetime, datetime] | None = None
        self.output_fields: list[tuple[str, str]] | None = None
        # The interval follows the claim timeout (min(10 s, timeout / 4)): a short timeout never loses a live run.
        self._beat = Heartbeat(jl, handle, heartbeat_interval_s()).start()
        _ACTIVE[(run_id, asset.job_name, handle.partition_key or "")] = self

    # ------------------------------------------------------------------ lifecycle
    @classmethod
    def begin(
        cls, context: Any, asset: LogDrivenAsset, partition_key: str, application_id: str | None = None
    ) -> PartitionRun:
        jl = job_log_or_fail()
        try:
            check_ordered(jl, asset.job_name, asset.spec, partition_key)
        except OutOfOrder as exc:
            raise Failure(
                description=scrub_text(f"{asset.job_name} [{partition_key}] not run: {exc}")
            ) from exc
        period = asset.spec.period_for_key(partition_key)
        try:
            handle = jl.claim(
                asset.job_name,
                period,
                run_id=context.run_id,
                partition_key=partition_key,
                incremental_type=asset.incremental_type,
                project_name=PROJECT_NAME,
                application_id=application_id,
            )
        except ClaimRefused as exc:
            raise Failure(description=scrub_text(f"duplicate run refused: {exc}")) from exc
        run = cls(jl, asset, handle, context.run_id, context)
        run._lineage_event("START", period=(period.start, period.end))
        try:
            run._check_upstreams(period)
        except BaseException as exc:
            run.fail(exc)
            raise
        return run

    def _check_upstreams(self, period: Period) -> None:
        """The upstream gate (`planner.require_upstreams_done`), recorded as the `checkdone` step."""
        if not self.asset.upstream:
            return
        with self.step("checkdone", source_type="job_log") as rec:
            rec.source_count = len(self.asset.upstream)
            jl, name = self.job_log, self.asset.job_name
            try:
                for check in require_upstreams_done(jl, name, period, self.asset.upstream):
                    rec.info(check.describe())
            except UpstreamNotDone as exc:
                rec.info(str(exc))
                raise Failure(description=scrub_text(str(exc))) from None

    @contextmanager
    def step(self, step_id: str, source_type: str | None = None, target_type: str | None = None) -> Iterator:
        with self.job_log.step(self.handle, step_id, source_type=source_type, target_type=target_type) as rec:
            yield rec

    def stage(
        self, store: TableStore, ref: TableRef, values: dict[str, str], df: DataFrame
    ) -> StagedPartition:
        """The `write` step: the partition's rows written where no reader sees them yet."""
        with self.step("write", source_type="spark", target_type="parquet") as rec:
            staged = store.stage(ref, values, df)
            self.output_fields = openlineage.schema_fields(df)  # the written schema, for the COMPLETE event
            rec.target_count = staged.row_count
            rec.success_count = staged.row_count
            rec.source_count = self.source_count
            rec.info(f"staged {staged.row_count} rows for {ref.qualified} {values}")
        return staged

    def publish_staged(self, store: TableStore, staged: StagedPartition) -> None:
        """Swap the staged rows in and mark the period SUCCESS; on failure the old partition stays, FAILURE."""
        try:
            store.publish(staged)
        except BaseException as exc:
            store.discard(staged)
            self.fail(exc)
            raise
        self.succeed()

    def publish(
        self, store: TableStore, ref: TableRef, values: dict[str, str], df: DataFrame
    ) -> StagedPartition:
        """Stage and publish (an asset without data-quality rules)."""
        try:
            staged = self.stage(store, ref, values, df)
        except BaseException as exc:
            self.fail(exc)
            raise
        self.publish_staged(store, staged)
        return staged

    def succeed(self) -> None:
        self._end(SUCCESS, None)

    def fail(self, exc: BaseException) -> None:
        if self.finished:
            return
        message = getattr(exc, "description", None) or f"{type(exc).__name__}: {exc}"
        self._end(FAILURE, message)
        alert_run_failure(self, message)

    def _end(self, status: str, error: str | None) -> None:
        if self.finished:
            return
        self.finished = True
        self._beat.stop()
        _ACTIVE.pop((self.run_id, self.asset.job_name, self.handle.partition_key or ""), None)
        self.job_log.finish(self.handle, status, error=error)
        self._lineage_event("COMPLETE" if status == SUCCESS else "FAIL", error=error)

    def _lineage_event(self, event_type: str, period: tuple | None = None, error: str | None = None) -> None:
        """OpenLineage START / COMPLETE / FAIL of this claimed attempt (never raises; `lineage/openlineage.py`)."""
        self.period = period or self.period
        start, end = self.period or (None, None)
        openlineage.emit_run_event(
            event_type,
            job_name=self.asset.job_name,
            run_id=self.lineage_run_id,
            nominal_start=start,
            nominal_end=end,
            output_fields=self.output_fields,
            error=scrub_text(error) if error else None,
        )


def alert_run_failure(run: PartitionRun, message: str) -> None:
    """Notify the alert sink (webhook or log) once per failed attempt."""
    alert_attempt_failure(run.job_log, run.handle, run.run_id, message)


def alert_attempt_failure(jl: JobLog, handle: JobHandle, run_id: str | None, message: str) -> None:
    """The failure alert of one claimed attempt (any log-driven asset, the landing included), once per attempt."""
    try:
        from sharp_dagster.alerts import AlertSink

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
