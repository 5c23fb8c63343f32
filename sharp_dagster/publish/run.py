"""One claimed period of one log-driven asset (`PartitionRun`): check, claim, gate, stage, fence, publish, finish.
The order of the steps and what each guarantees is told in this package's `materialize.py`; a range of periods as
one batch in `range.py`.

What a run stages is a `Staged`: a table partition on a branch (`spark/wap.StagedPartition`) or an ODS table's
days on a branch (`cdc/ods_stage.StagedOdsDay`). The lifecycle only reads it (the rules), publishes it and
discards it, so both go through the same steps.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from dagster import Failure
from pyspark.sql import DataFrame

from sharp_dagster.dqc.rules import Rule
from sharp_dagster.failpoints import failpoint
from sharp_dagster.joblog import (
    FAILURE,
    SUCCESS,
    ClaimRefused,
    JobHandle,
    JobLog,
    OutOfOrder,
    Period,
    check_ordered,
)
from sharp_dagster.joblog.errors import ClaimLost
from sharp_dagster.joblog.heartbeat import Heartbeat, heartbeat_interval_s
from sharp_dagster.joblog.planner import LogDrivenAsset, UpstreamNotDone, require_upstreams_done
from sharp_dagster.lineage import openlineage
from sharp_dagster.logdriven import PROJECT_NAME, alert_attempt_failure, job_log_or_fail
from sharp_dagster.periods import period_values
from sharp_dagster.publish.failures import error_text
from sharp_dagster.publish.warehouse import RunWarehouse, application_id
from sharp_dagster.redact import scrub_text
from sharp_dagster.spark.iceberg import IcebergTables
from sharp_dagster.spark.tables import TableRef
from sharp_dagster.spark.wap import STAGE_PREFIX, StagedPartition, StalePublishError, branch_name
from sharp_dagster.warehouse.catalog_lineage import job_lineage

log = logging.getLogger(__name__)

# A staging branch of another partition older than this belongs to no live run (a run stages, audits and
# publishes within minutes); the next run of the table drops it.
ORPHAN_AGE_S = 24 * 3600


class Staged(Protocol):
    """What a run stages, as the lifecycle handles it: the rules read it, then it is published or discarded. One
    that re-publishes later periods with the run's (an ODS re-run) also offers them as `later_parts`, audited
    before the publish (`later.py`)."""

    row_count: int

    @property
    def label(self) -> str: ...

    def read(self, tables: IcebergTables) -> DataFrame: ...

    def publish(self, tables: IcebergTables) -> int: ...

    def discard(self, tables: IcebergTables) -> None: ...

    @property
    def later_parts(self) -> Sequence[tuple[str, Staged]]: ...


# compute(period, run) -> the partition's rows, which the lifecycle stages on the run's branch; or what the compute
# staged itself (an ODS merge's days: `Staged`). It records its own read/transform steps. `period` is the run's
# `Period`, parsed from the partition key once when the run started (`materialize.py`).
Compute = Callable[[Period, "PartitionRun"], "DataFrame | Staged"]


@dataclass(frozen=True)
class AssetPublish:
    """What an asset's factory hands the publishing: the table a partition is written to, its grain, its job-log
    view, how its rows are computed (or staged), its rules and the grains of the tables those rules may read."""

    target: TableRef
    grain: str
    log_asset: LogDrivenAsset
    compute: Compute
    rules: Sequence[Rule] = ()
    grains: dict[str, str] = field(default_factory=dict)
    # A range batch's staging when the asset stages its periods itself (an ODS merge): (the batch's claimed runs,
    # its branch) -> what it staged, with one `Staged` per run in `.parts`, published and discarded as one.
    stage_range: Callable[[list[PartitionRun], str], Any] | None = None
    # Checks of a staged period beside its rules (an ODS day's schema check, `assets/ods_schema_check.py`):
    # (its run, what it staged) -> rule results, gated, reported and alerted with the rules' own.
    audit: Callable[[PartitionRun, Any], list] | None = None

    @property
    def job_name(self) -> str:
        return self.log_asset.job_name


class PartitionRun:
    """One claimed period of one asset, from claim to SUCCESS/FAILURE."""

    def __init__(
        self,
        jl: JobLog,
        asset: LogDrivenAsset,
        period: Period,
        handle: JobHandle,
        run_id: str,
        context: Any,
        tables: IcebergTables | None,
    ):
        self.job_log = jl
        self.asset = asset
        self.period = period
        self.handle = handle
        self.run_id = run_id
        self.context = context
        self.tables = tables
        self.source_count: int | None = None
        self.finished = False
        self.staged: list[Staged] = []
        self.lineage_run_id = openlineage.new_run_id()  # the OpenLineage run id of this attempt
        self._window: tuple[datetime, datetime] | None = None  # the nominal window of its lineage events
        self.output_fields: list[tuple[str, str]] | None = None
        self._beat = Heartbeat(jl, handle, heartbeat_interval_s()).start()

    def between_beats(self) -> bool:
        """Is the claim's heartbeat between two beats (not inside a job-log transaction)? Where a fail point may
        stop the run (`Heartbeat.between_beats`); a range run asks its last period's."""
        return self._beat.between_beats()

    # ------------------------------------------------------------------ check, claim, gate
    @classmethod
    def begin(
        cls,
        context: Any,
        asset: LogDrivenAsset,
        period: Period,
        store: RunWarehouse,
        held: dict[str, str] | None = None,
        in_batch: bool = False,
    ) -> PartitionRun:
        """Check, claim, gate, then open the warehouse: Spark starts only once a claim is won and its gate passed
        (`warehouse.py`), so a refused run never starts it; the claim records the Spark application id then.
        `held`: the earlier periods this run claimed already (`check_ordered`). `in_batch`: a refused gate withdraws
        the claim instead of recording FAILURE (the range is then run one period at a time, which records it:
        `range.py`)."""
        jl = job_log_or_fail()
        partition_key = period.partition_key
        opened = store.opened
        try:
            check_ordered(jl, asset.job_name, asset.spec, period, held=held)
        except OutOfOrder as exc:
            raise Failure(
                description=scrub_text(f"{asset.job_name} [{partition_key}] not run: {exc}")
            ) from None
        try:
            handle = jl.claim(
                asset.job_name,
                period,
                run_id=context.run_id,
                partition_key=partition_key,
                incremental_type=asset.incremental_type,
                project_name=PROJECT_NAME,
                application_id=application_id(opened),
            )
        except ClaimRefused as exc:
            raise Failure(description=scrub_text(f"duplicate run refused: {exc}")) from None
        run = cls(jl, asset, period, handle, context.run_id, context, opened)
        run._lineage_event("START", window=(period.start, period.end))
        try:
            run._check_upstreams(period)
            if opened is None:  # the run's first claim passed its gate: Spark starts here
                run.tables = store.open()
                jl.set_application_id(handle, application_id(run.tables))
        except BaseException as exc:
            if in_batch and isinstance(exc, Exception):
                run.withdraw()
            else:
                run.fail(exc)
            raise
        failpoint("after_claim", quiet=run._beat.between_beats())
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

    # ------------------------------------------------------------------ stage
    @property
    def key(self) -> str:
        return self.handle.partition_key or ""

    def _branch_prefix(self) -> str:
        return branch_name(f"{self.key}_")  # "stage_2024_01_02_": every attempt's branch of this partition

    def _clean_orphans(self, ref: TableRef) -> list[str]:
        """Drop the staging branches this run's claim proves dead (`dead_branches`)."""
        orphans = dead_branches(self.tables, ref, [self], self.branch)
        if orphans:
            self.tables.drop_branches(ref, orphans)
            log.info("%s: dropped staging branches of dead attempts: %s", ref.qualified, orphans)
        return orphans

    @property
    def branch(self) -> str:
        return branch_name(f"{self.key}_{self.handle.token}")

    def properties(self) -> dict[str, str]:
        """What the table's history shows about the attempt that wrote a snapshot (`sharp.<key>`)."""
        return {
            "attempt": str(self.handle.attempt),
            "job_id": self.handle.job_id,
            "job_name": self.handle.job_name,
            "partition": self.key,
            "run_id": str(self.run_id),
        }

    def stage(
        self, ref: TableRef, values: dict[str, str], df: DataFrame, step_id: str = "write"
    ) -> StagedPartition:
        """The `write` step (or `step_id`, for a second table): the partition's rows on this attempt's branch,
        where no reader sees them yet; published with the rest of the run's tables by `publish()`."""
        with self.step(step_id, source_type="spark", target_type="iceberg") as rec:
            orphans = self._clean_orphans(ref)
            if orphans:
                rec.info(f"dropped {len(orphans)} staging branch(es) of dead attempts: {', '.join(orphans)}")
            staged = self.tables.stage(
                ref,
                values,
                df,
                token=str(self.handle.token),
                properties=self.properties(),
                branch=self.branch,
            )
            self.staged.append(staged)
            self.output_fields = openlineage.schema_fields(df)  # the written schema, for the COMPLETE event
            rec.target_count = staged.row_count
            rec.success_count = staged.row_count
            rec.source_count = self.source_count
            rec.info(f"staged {staged.row_count} rows for {ref.qualified} {values} on {staged.branch}")
        return staged

    def adopt(self, staged: Staged) -> Staged:
        """What the compute staged itself (an ODS merge's days), published or discarded with the run."""
        self.staged.append(staged)
        return staged

    @property
    def values(self) -> dict[str, str]:
        """The partition columns' values of this period (`{dt}` or `{dt, hour}`)."""
        return period_values(self.period)

    def discard(self) -> None:
        """Drop every branch this run staged (nothing of it reaches `main`)."""
        for staged in self.staged:
            try:
                staged.discard(self.tables)
            except Exception:  # the next run of the partition drops it as an orphan
                log.warning("could not drop the staging branch of %s", staged.label)
        self.staged = []

    # ------------------------------------------------------------------ fence, publish, finish
    def publish(self) -> None:
        """Fence, then put everything staged on `main`, then SUCCESS. Raises Failure (FAILURE recorded) when the
        claim was lost or the table changed under a stale run (`StalePublishError`, also an ODS table's `main`
        fence); nothing of this run is then published."""
        failpoint("after_audit", quiet=self._beat.between_beats())
        with self.step("publish", target_type="iceberg") as rec:
            try:
                self.job_log.assert_current(self.handle)
            except ClaimLost as exc:
                self.discard()
                rec.info(str(exc))
                raise Failure(description=scrub_text(f"{self._label()} not published: {exc}")) from None
            for staged in list(self.staged):
                try:
                    snapshot = staged.publish(self.tables)
                except StalePublishError as exc:
                    self.discard()
                    raise Failure(description=scrub_text(f"{self._label()} not published: {exc}")) from None
                self.staged.remove(staged)
                rec.info(f"published {staged.label} as snapshot {snapshot}")
                rec.target_count = (rec.target_count or 0) + staged.row_count
        failpoint("after_publish", quiet=self._beat.between_beats())
        self.succeed()

    def _label(self) -> str:
        return f"{self.asset.job_name} [{self.key}] (attempt {self.handle.attempt})"

    def succeed(self) -> None:
        self._end(SUCCESS, None)

    def fail(self, exc: BaseException) -> None:
        if self.finished:
            return
        self.discard()
        message = scrub_text(error_text(exc))
        self._end(FAILURE, message)
        alert_attempt_failure(self.job_log, self.handle, self.run_id, message)

    def withdraw(self) -> None:
        """Take the attempt back (`JobLog.withdraw`): nothing of it was published and the same run retries the
        period at once; its staged branches are dropped and the claim, row and steps deleted."""
        if self.finished:
            return
        self.finished = True
        self._beat.stop()
        self.discard()
        if not self.job_log.withdraw(self.handle):
            log.warning("%s: the claim was no longer held when withdrawn", self._label())
        self._lineage_event("FAIL", error="withdrawn: the range is run one period at a time")

    def _end(self, status: str, error: str | None) -> None:
        if self.finished:
            return
        self.finished = True
        self._beat.stop()
        self.job_log.finish(self.handle, status, error=error)
        self._lineage_event("COMPLETE" if status == SUCCESS else "FAIL", error=error)

    def _lineage_event(self, event_type: str, window: tuple | None = None, error: str | None = None) -> None:
        """OpenLineage START / COMPLETE / FAIL of this claimed attempt (never raises; `lineage/openlineage.py`)."""
        self._window = window or self._window
        start, end = self._window or (None, None)
        openlineage.emit_run_event(
            event_type,
            job_name=self.asset.job_name,
            run_id=self.lineage_run_id,
            nominal_start=start,
            nominal_end=end,
            output_fields=self.output_fields,
            error=scrub_text(error) if error else None,
            lineage=job_lineage(self.asset.job_name),
        )


def dead_branches(tables: IcebergTables, ref: TableRef, runs: Sequence[PartitionRun], ours: str) -> list[str]:
    """The staging branches of `ref` that the claims of `runs` prove dead, `ours` aside: other attempts of their
    partitions (the claims are held, so no other attempt is running), and any branch older than `ORPHAN_AGE_S`."""
    now_ms = time.time() * 1000
    prefixes = tuple(run._branch_prefix() for run in runs)
    return [
        name
        for name, ts in tables.staged_branches(ref).items()
        if name != ours
        and name.startswith(STAGE_PREFIX)
        and (name.startswith(prefixes) or now_ms - ts >= ORPHAN_AGE_S * 1000)
    ]
