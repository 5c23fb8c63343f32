"""How a partition of a log-driven asset is published: the one lifecycle of every log-driven run (SQL tables, ODS
merges; the landing shares its claim, heartbeat, fence and alerts), whether launched from the UI, a backfill, a
sensor or `sharp-dagster joblog rerun` (which launches Dagster runs).

    check ─▶ claim ─▶ gate ─▶ read ─▶ transform ─▶ stage ─▶ strong rules ─▶ fence ─▶ publish ─▶ SUCCESS ─▶ weak rules

1. **check**: an earlier period of the asset that is not SUCCESS stops the run, naming it (`planner.check_ordered`);
   the job-log database must be reachable (else nothing is written; the URL shown without its password).
2. **claim**: the period is claimed atomically with a fencing token, its attempt number (`JobLog.claim`; a second
   run is refused naming the holder); a heartbeat thread keeps the claim alive (interval min(10 s, timeout / 4)).
3. **gate**: every upstream period the partition reads (any grain, `@lookback` included) must be SUCCESS in its
   latest attempt (`planner.require_upstreams_done`), else the run is refused and recorded as FAILURE naming it.
4. **read / transform**: the asset's `compute(key, run)` records its steps and returns the partition's rows.
5. **stage**: the rows are written to an Iceberg branch `stage_<partition>_<attempt>` of the table; `main`, which
   every reader reads, does not change (`spark/wap.py`). Branches left by killed attempts of the same partition
   are dropped first. A run may stage several tables (the ODS merge stages `ods_state` and `ods`).
6. **strong rules**: all rules of the partition run in one scan of the staged rows; a failed strong rule drops the
   branches, records FAILURE and alerts: nothing was published.
7. **fence**: `JobLog.assert_current` checks, in the transaction that records the publish time, that the claim is
   still held with this run's token. A stale run (paused past the claim timeout and taken over) stops here.
8. **publish**: each staged partition is cherry-picked onto `main` (one metadata commit per table, no copy); the
   snapshot's summary carries the token, attempt, job id, partition and run id (`sharp-dagster table history`).
9. **SUCCESS** is recorded (it releases the claim); then the **weak rules** are reported and alerted.

The window left after the fence: a run that passed the fence and then froze before its table commit can still
commit when it wakes, after another run took the period over. It publishes rows that passed the strong rules of
this very period, and then: if the taker already published, Iceberg refuses the stale commit (the partition changed
since the stale branch was cut: `StalePublishError`); if the taker has not, the taker's own publish is refused the
same way and it ends FAILURE. Either way the table holds audited rows of one attempt, never a mix, and the job log
never says SUCCESS for rows it did not publish: a FAILURE latest attempt keeps downstream out until a re-run.

A range run of a SQL asset (a single-run backfill) goes through the same steps for all its pending periods at once
(`lifecycle_range.py`: one write, one audit pass, one fence transaction, one publish), falling back to the periods
one by one when that batch cannot publish.

The IO manager only loads upstream partitions; it never writes. Fail points (`failpoints.py`) mark the steps the
fault tests stop or kill a run at.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from dagster import (
    AssetMaterialization,
    Failure,
    MaterializeResult,
    MetadataValue,
    TableColumn,
    TableSchema,
)
from pyspark.sql import DataFrame

from sharp_dagster.assets import quality
from sharp_dagster.dqc.runner import BlockingFailure, blocking_failures
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
from sharp_dagster.logdriven import (
    PROJECT_NAME,
    REFRESH_TAG,
    alert_attempt_failure,
    job_log_or_fail,
)
from sharp_dagster.periods import partition_values
from sharp_dagster.redact import scrub_text
from sharp_dagster.spark.iceberg import IcebergTables
from sharp_dagster.spark.iceberg_base import java_error
from sharp_dagster.spark.tables import TableRef
from sharp_dagster.spark.wap import STAGE_PREFIX, StagedPartition, StalePublishError, branch_name
from sharp_dagster.warehouse.catalog_lineage import job_lineage

log = logging.getLogger("sharp_dagster.lifecycle")

# A staging branch of another partition older than this belongs to no live run (a run stages, audits and
# publishes within minutes); the next run of the table drops it.
ORPHAN_AGE_S = 24 * 3600

# compute(key, run) -> the partition's rows (it records its own read/transform steps and may stage extra tables).
Compute = Callable[[str, "PartitionRun"], DataFrame]


class PartitionRun:
    """One claimed period of one asset, from claim to SUCCESS/FAILURE."""

    def __init__(
        self,
        jl: JobLog,
        asset: LogDrivenAsset,
        handle: JobHandle,
        run_id: str,
        context: Any,
        tables: IcebergTables,
    ):
        self.job_log = jl
        self.asset = asset
        self.handle = handle
        self.run_id = run_id
        self.context = context
        self.tables = tables
        self.source_count: int | None = None
        self.finished = False
        self.staged: list[StagedPartition] = []
        self.lineage_run_id = openlineage.new_run_id()  # the OpenLineage run id of this attempt
        self.period: tuple[datetime, datetime] | None = None
        self.output_fields: list[tuple[str, str]] | None = None
        # The range batch this period belongs to (`lifecycle_range.RangeBatch`), if any.
        self.batch: Any = None
        self._beat = Heartbeat(jl, handle, heartbeat_interval_s()).start()

    # ------------------------------------------------------------------ check, claim, gate
    @classmethod
    def begin(
        cls,
        context: Any,
        asset: LogDrivenAsset,
        partition_key: str,
        tables: IcebergTables,
        application_id: str | None = None,
        held: dict[str, str] | None = None,
        in_batch: bool = False,
    ) -> PartitionRun:
        """Check, claim, gate. `held`: the earlier periods this run claimed already (`check_ordered`). `in_batch`:
        a refused gate withdraws the claim instead of recording FAILURE (the range is then run one period at a
        time, which records it: `lifecycle_range.py`)."""
        jl = job_log_or_fail()
        try:
            check_ordered(jl, asset.job_name, asset.spec, partition_key, held=held)
        except OutOfOrder as exc:
            raise Failure(
                description=scrub_text(f"{asset.job_name} [{partition_key}] not run: {exc}")
            ) from None
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
            raise Failure(description=scrub_text(f"duplicate run refused: {exc}")) from None
        run = cls(jl, asset, handle, context.run_id, context, tables)
        run._lineage_event("START", period=(period.start, period.end))
        try:
            run._check_upstreams(period)
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

    def stage_beside(
        self, ref: TableRef, values: dict[str, str], df: DataFrame, step_id: str, checkpointed: bool = False
    ) -> DataFrame:
        """A second table's partition (an ODS merge's state) staged beside the target and published with it;
        returns its rows as staged, without the partition columns. In a range batch the rows are kept
        (checkpointed, unless `checkpointed` says `df` reads a checkpoint already) and written with the batch's
        other periods in one write (`RangeBatch`)."""
        if self.batch is not None:
            return self.batch.add(self, ref, values, df, step_id, checkpointed)
        staged = self.stage(ref, values, df, step_id=step_id)
        return self.tables.read_staged(staged).drop(*ref.partition_cols)

    def batch_shared(self, name: Any, build: Callable[[list[str]], Any]) -> Any:
        """`build(the batch's keys)` once per range batch, for all its periods; None outside a batch of 2+."""
        batch = self.batch
        return None if batch is None or len(batch.keys) < 2 else batch.shared(name, lambda: build(batch.keys))

    def staged_beside(self, ref: TableRef, values: dict[str, str]) -> DataFrame | None:
        """The rows an earlier period of this range batch staged for `ref` at `values` (the previous day's state
        of an ODS merge, not published yet), or None."""
        return self.batch.rows(ref, values) if self.batch is not None else None

    def discard(self) -> None:
        """Drop every branch this run staged (nothing of it reaches `main`)."""
        for staged in self.staged:
            try:
                self.tables.discard(staged)
            except Exception:  # the next run of the partition drops it as an orphan
                log.warning("could not drop staging branch %s of %s", staged.branch, staged.ref.qualified)
        self.staged = []

    # ------------------------------------------------------------------ fence, publish, finish
    def publish(self) -> None:
        """Fence, then put every staged partition on `main`, then SUCCESS. Raises Failure (FAILURE recorded) when
        the claim was lost or the table changed under a stale run; nothing of this run is then published."""
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
                    snapshot = self.tables.publish(staged)
                except StalePublishError as exc:
                    self.discard()
                    raise Failure(description=scrub_text(f"{self._label()} not published: {exc}")) from None
                self.staged.remove(staged)
                rec.info(f"published {staged.ref.qualified} {staged.values_dict} as snapshot {snapshot}")
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


@contextmanager
def claimed_range(
    context: Any,
    job_name: str,
    window: Any,
    incremental_type: str,
    application_id: str | None = None,
) -> Iterator[JobHandle]:
    """The lifecycle of a run whose job-log window is a range, not a period (the hourly landing's Kafka offsets):
    claim (token, heartbeat) → the caller's steps, which fence with `JobLog.assert_current` before anything
    downstream can see their result → SUCCESS. Any failure records FAILURE (scrubbed), alerts once and reaches
    Dagster as a scrubbed `Failure`. Ranges have no order check and no upstream gate: the next range starts where
    the last successful one ended (`joblog/incremental.py`)."""
    jl = job_log_or_fail()
    label = run_label(context)
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
    """The run's partition, or `first..last` for a range (a single-run backfill of the hourly landing)."""
    keys = context.partition_key_range
    return keys.start if keys.start == keys.end else f"{keys.start}..{keys.end}"


def as_failure(exc: BaseException, label: str) -> BaseException:
    """What Dagster shows for a failed run: a `Failure` whose text is scrubbed of secrets (raw exception text may
    quote a database URL); interrupts pass through unchanged."""
    if isinstance(exc, Failure) or not isinstance(exc, Exception):
        return exc
    return Failure(description=scrub_text(f"{label}: {error_text(exc)}"))


def error_text(exc: BaseException) -> str:
    """`Class: message`; for an error raised in the JVM, the Java class and message (Py4J's own text is the
    whole Java stack trace)."""
    if getattr(exc, "description", None):
        return str(exc.description)  # type: ignore[attr-defined]
    kind, message = java_error(exc)
    return f"{kind}: {message}"


# ---------------------------------------------------------------------------------------------------- one asset
# The most periods one batch holds (an ODS merge's batch keeps every day's state until its write): a longer range
# goes as several batches in order.
BATCH_MAX_PERIODS = 31


def materialize_partitions(
    context: Any,
    target: TableRef,
    grain: str,
    log_asset: LogDrivenAsset,
    compute: Compute,
    rules: list,
    grains: dict[str, str],
    batch: bool = False,
) -> Iterator[Any]:
    """Materialize the run's partitions of one log-driven asset, strictly oldest first, each through the whole
    lifecycle. With `batch`, several pending partitions go as one batch first (`lifecycle_range.py`: one write,
    one audit pass, one publish); when it is abandoned (nothing published) they go one by one as below. Yields
    Dagster events: check results and one `MaterializeResult` (a range run also yields one
    `AssetMaterialization` per partition published before a failure). In a range (a single-run backfill),
    partitions already SUCCESS are skipped unless the run is a refresh, so a relaunched backfill resumes at its
    failure; at the first failure the later partitions never run."""
    spark_resource = context.resources.spark
    job_log_or_fail()  # the job log first: when it is unreachable nothing is touched (the catalog lives there too)
    try:
        tables = spark_resource.store()
    except Exception as exc:
        raise Failure(
            description=scrub_text(
                f"the warehouse catalog is unavailable, nothing was written: {error_text(exc)}"
            )
        ) from None
    keys = list(context.partition_keys)
    refresh = context.run.tags.get(REFRESH_TAG) == "true"
    done: list[tuple[str, int]] = []
    last_results: list = []
    schema = None
    single = len(keys) == 1
    pending = []
    for key in keys:
        if not single and not refresh and already_done(log_asset, key):
            context.log.info(
                f"{log_asset.job_name} [{key}]: SUCCESS in the job log, skipped ({REFRESH_TAG}=true re-runs)"
            )
            continue
        pending.append(key)
    while pending:
        chunk, pending = pending[:BATCH_MAX_PERIODS], pending[BATCH_MAX_PERIODS:]
        if batch and len(chunk) > 1:
            from sharp_dagster.lifecycle_range import materialize_range

            outcome = materialize_range(
                context, target, grain, log_asset, compute, rules, grains, tables, chunk
            )
            if outcome is not None:
                batch_done, last_results, schema = outcome
                done.extend(batch_done)
                continue
        for key in chunk:
            try:
                rows, last_results, schema = yield from _one_period(
                    context, target, grain, log_asset, compute, rules, grains, tables, key, single
                )
            except BaseException:
                if not single:  # what this run published before the failure
                    for done_key, done_rows in done:
                        yield AssetMaterialization(
                            asset_key=context.asset_key,
                            partition=done_key,
                            metadata={
                                "dagster/row_count": done_rows,
                                "dagster/partition_row_count": done_rows,
                            },
                        )
                raise
            done.append((key, rows))
    if not single:  # one result per check for the run (the last partition's); all are in dqc_result
        for result in last_results:
            yield quality.check_result(context.asset_key, result)
    yield MaterializeResult(metadata=_metadata(target, tables, done, schema, last_results, single))


def _one_period(
    context,
    target: TableRef,
    grain: str,
    log_asset: LogDrivenAsset,
    compute: Compute,
    rules: list,
    grains: dict[str, str],
    tables: IcebergTables,
    key: str,
    single: bool,
) -> Iterator[Any]:
    """One period through the whole lifecycle, on its own; yields its Dagster events and returns `(rows published,
    rule results, schema)`. Any failure records FAILURE and is raised as a scrubbed `Failure`."""
    app_id = context.resources.spark.session().sparkContext.applicationId
    run = PartitionRun.begin(context, log_asset, key, tables, application_id=app_id)
    try:
        df = compute(key, run)
        staged = run.stage(target, partition_values(key, grain), df)
        results = quality.evaluate(run, tables, staged, rules, grain, grains) if rules else []
    except BaseException as exc:
        run.fail(exc)
        raise as_failure(exc, f"{log_asset.job_name} [{key}]") from None
    yield from _strong_gate(context, run, results, report_passed=single)
    try:
        run.publish()
    except BaseException as exc:
        run.fail(exc)
        raise as_failure(exc, f"{log_asset.job_name} [{key}]") from None
    yield from weak_report(context, run, results, report=single)
    context.log.info(f"{log_asset.job_name} [{key}]: {staged.row_count} rows published")
    return staged.row_count, results, df.schema


def _metadata(target: TableRef, tables: IcebergTables, done, schema, results, single: bool) -> dict[str, Any]:
    meta: dict[str, Any] = {"dagster/table_name": target.qualified, **quality.score_metadata(results)}
    if single and done:
        rows = done[0][1]
        meta.update({"dagster/row_count": rows, "dagster/partition_row_count": rows})
    else:
        meta.update({"partitions_published": len(done), "rows_by_partition": MetadataValue.json(dict(done))})
    if schema is not None:
        meta["dagster/column_schema"] = TableSchema(
            columns=[TableColumn(f.name, f.dataType.simpleString()) for f in schema.fields]
        )
    if done:
        meta["snapshot_id"] = str(tables.current_snapshot_id(target))
    return meta


def _strong_gate(context, run: PartitionRun, results, report_passed: bool = True):
    """Report the strong rules; when one failed, keep the staged rows out and fail the run naming it."""
    strong = [r for r in results if r.severity == "strong"]
    failed = blocking_failures(results)
    for r in strong:
        if report_passed or not r.passed:
            yield quality.check_result(context.asset_key, r)
    if failed:
        error = BlockingFailure(failed)
        quality.alert(failed, run.job_log.engine)
        run.fail(error)
        raise Failure(
            description=scrub_text(f"{run.asset.job_name} [{run.key}] not published: {error}"),
            metadata={"failed_rules": [r.rule_id for r in failed]},
        )


def weak_report(context, run: PartitionRun, results, report: bool = True):
    """After publishing: report the weak rules (WARN) and alert the failed ones; never stops the pipeline."""
    weak = [r for r in results if r.severity != "strong"]
    if report:
        for r in weak:
            yield quality.check_result(context.asset_key, r)
    failing = [r for r in weak if not r.passed]
    if failing:
        context.log.warning(
            f"{run.asset.job_name}: weak rules failed: " + "; ".join(r.message for r in failing)
        )
        quality.alert(failing, run.job_log.engine)


def already_done(log_asset: LogDrivenAsset, key: str) -> bool:
    """Is this period's latest attempt SUCCESS in the job log? (A relaunched backfill resumes after it.)"""
    period = log_asset.spec.period_for_key(key)
    latest = job_log_or_fail().latest_attempts(log_asset.job_name, starts=[period.range_start])
    attempt = latest.get(period.range_start)
    return attempt is not None and attempt.status == SUCCESS
