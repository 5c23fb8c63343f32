"""How a partition of a log-driven asset is published: the one lifecycle of every log-driven run (SQL tables, ODS
merges; the landing shares its claim, heartbeat, fence and alerts: `claimed_range.py`), whether launched from the
UI, a backfill, a sensor or `sharp-dagster log rerun` (which launches Dagster runs).

    check ─▶ claim ─▶ gate ─▶ read ─▶ transform ─▶ stage ─▶ strong rules ─▶ fence ─▶ publish ─▶ SUCCESS ─▶ weak rules

1. **check**: an earlier period of the asset that is not SUCCESS stops the run, naming it (`planner.check_ordered`);
   the job-log database must be reachable (else nothing is written; the URL shown without its password).
2. **claim**: the period is claimed atomically with a fencing token, its attempt number (`JobLog.claim`; a second
   run is refused naming the holder); a heartbeat thread keeps the claim alive (interval min(10 s, timeout / 4)).
3. **gate**: every upstream period the partition reads (any grain, `@lookback` included) must be SUCCESS in its
   latest attempt (`planner.require_upstreams_done`), else the run is refused and recorded as FAILURE naming it.
4. **read / transform**: the asset's `compute(period, run)` records its steps and returns the partition's rows.
5. **stage**: the rows are written to an Iceberg branch `stage_<partition>_<attempt>` of the table; `main`, which
   every reader reads, does not change (`spark/wap.py`). Branches left by killed attempts of the same partition
   are dropped first. An ODS merge stages its day itself (`cdc/ods/stage.py`): the day merged onto the branch
   `stage_<partition>_<attempt>` of `ods.<table>` and `ods_state.<table>`, cut at the previous day's tag, and, when
   later days are published already (a re-run), every later day re-merged after it on the same branch.
6. **strong rules**: all rules of the partition run in one scan of the staged rows (`rules.py`); a failed strong
   rule drops the branches, records FAILURE and alerts: nothing was published. A run that re-publishes later
   periods (an ODS re-run) audits each of them the same way, with its own parameters (`later.py`): a failure
   there publishes nothing either and fails the run naming the period.
7. **fence**: `JobLog.assert_current` checks, in the transaction that records the publish time, that the claim is
   still held with this run's token. A stale run (paused past the claim timeout and taken over) stops here.
8. **publish**: each staged partition is cherry-picked onto `main` (one metadata commit per table, no copy); the
   snapshot's summary carries the token, attempt, job id, partition and run id (`sharp-dagster table history`).
   An ODS day is published by reference commits only: `main` of both tables fast-forwarded to the branch (or
   replaced, for a re-run), fenced on `main`'s head when the branch was cut, and each staged day tagged.
9. **SUCCESS** is recorded (it releases the claim); then the **weak rules** are reported and alerted (those of the
   later periods re-published too, each reported on its own partition).

The window left after the fence: a run that passed the fence and then froze before its table commit can still
commit when it wakes, after another run took the period over. It publishes rows that passed the strong rules of
this very period, and then: if the taker already published, Iceberg refuses the stale commit (the partition changed
since the stale branch was cut: `StalePublishError`); if the taker has not, the taker's own publish is refused the
same way and it ends FAILURE. Either way the table holds audited rows of one attempt, never a mix, and the job log
never says SUCCESS for rows it did not publish: a FAILURE latest attempt keeps downstream out until a re-run.

A range run (a single-run backfill, of a SQL asset or an ODS merge) goes through the same steps for all its
pending periods at once (`range.py`: one write, one audit pass, one fence transaction, one publish), falling back
to the periods one by one when that batch cannot publish.

The IO manager only loads upstream partitions; it never writes. Fail points (`failpoints.py`) mark the steps the
fault tests stop or kill a run at.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import nullcontext
from typing import Any

from dagster import AssetMaterialization, MaterializeResult, MetadataValue, TableColumn, TableSchema
from pyspark.sql import DataFrame

from sharp_dagster.dqc.runner import blocking_failures
from sharp_dagster.joblog import SUCCESS, Period
from sharp_dagster.logdriven import REFRESH_TAG, job_log_or_fail
from sharp_dagster.publish.failures import as_failure
from sharp_dagster.publish.later import audit_later, later_gate, later_report
from sharp_dagster.publish.range import materialize_range
from sharp_dagster.publish.rules import check_result, evaluate, score_metadata, strong_gate, weak_report
from sharp_dagster.publish.run import AssetPublish, PartitionRun
from sharp_dagster.publish.warehouse import RunWarehouse
from sharp_dagster.spark.iceberg import IcebergTables

# The most periods one batch holds (an ODS merge's batch keeps every day's changes until its write): a longer range
# goes as several batches in order.
BATCH_MAX_PERIODS = 31


def materialize_partitions(
    context: Any, asset: AssetPublish, batch: bool = False, shared: RunWarehouse | None = None
) -> Iterator[Any]:
    """Materialize the run's partitions of one log-driven asset, strictly oldest first, each through the whole
    lifecycle. With `batch`, several pending partitions go as one batch first (`range.py`: one write, one audit
    pass, one publish); when it is abandoned (nothing published) they go one by one as below. Yields Dagster
    events: check results and one `MaterializeResult` (a range run also yields one `AssetMaterialization` per
    partition published before a failure). In a range (a single-run backfill), partitions already SUCCESS are
    skipped unless the run is a refresh, so a relaunched backfill resumes at its failure; at the first failure the
    later partitions never run. The warehouse is opened at the first claim (`warehouse.RunWarehouse`); `shared`:
    the run's, when the caller shares one (a source's day: one for every table, `assets/ods_source.py`)."""
    job_log_or_fail()  # unreachable: nothing is touched
    with RunWarehouse(context) if shared is None else nullcontext(shared) as store:
        yield from _materialize(context, asset, batch, store)


def _materialize(context: Any, asset: AssetPublish, batch: bool, store: RunWarehouse) -> Iterator[Any]:
    periods = [asset.log_asset.spec.period_for_key(key) for key in context.partition_keys]  # parsed once here
    refresh = context.run.tags.get(REFRESH_TAG) == "true"
    single = len(periods) == 1
    pending = []
    for period in periods:
        if not single and not refresh and already_done(asset, period):
            context.log.info(
                f"{asset.job_name} [{period.partition_key}]: SUCCESS in the job log, skipped "
                f"({REFRESH_TAG}=true re-runs)"
            )
            continue
        pending.append(period)
    done: list[tuple[str, int]] = []
    last_results: list = []
    schema = None
    while pending:
        chunk, pending = pending[:BATCH_MAX_PERIODS], pending[BATCH_MAX_PERIODS:]
        if batch and len(chunk) > 1:
            outcome = materialize_range(context, asset, store, chunk)
            if outcome is not None:
                batch_done, last_results, schema, (last_run, later) = outcome
                done.extend(batch_done)
                yield from later_report(context, last_run, later)
                continue
        for period in chunk:
            try:
                rows, last_results, schema = yield from _one_period(context, asset, store, period, single)
            except BaseException:
                if not single:
                    yield from _published_before_the_failure(context, done)
                raise
            done.append((period.partition_key, rows))
    if not single:  # one result per check for the run (the last partition's); all are in dqc_result
        for result in last_results:
            yield check_result(context.asset_key, result)
    yield MaterializeResult(metadata=_metadata(asset, store.opened, done, schema, last_results, single))


def _published_before_the_failure(
    context: Any, done: list[tuple[str, int]]
) -> Iterator[AssetMaterialization]:
    for key, rows in done:
        yield AssetMaterialization(
            asset_key=context.asset_key,
            partition=key,
            metadata={"dagster/row_count": rows, "dagster/partition_row_count": rows},
        )


def _one_period(
    context: Any, asset: AssetPublish, store: RunWarehouse, period: Period, single: bool
) -> Iterator[Any]:
    """One period through the whole lifecycle, on its own; yields its Dagster events and returns `(rows published,
    rule results, schema)`. Any failure records FAILURE and is raised as a scrubbed `Failure`."""
    key = period.partition_key
    later: list = []
    run = PartitionRun.begin(context, asset.log_asset, period, store)
    tables = run.tables
    try:
        out = asset.compute(period, run)
        staged = run.stage(asset.target, run.values, out) if isinstance(out, DataFrame) else run.adopt(out)
        results = evaluate(run, tables, staged, asset.rules, asset.grains) if asset.rules else []
        results += asset.audit(run, staged) if asset.audit is not None else []
        # A run that re-publishes later periods (an ODS re-run) audits them too: unless its own rules failed.
        if not blocking_failures(results):
            later = audit_later(run, tables, staged, asset)
    except BaseException as exc:
        run.fail(exc)
        raise as_failure(exc, f"{asset.job_name} [{key}]") from None
    later_gate(run, later)
    yield from strong_gate(context, run, results, report_passed=single)
    try:
        run.publish()
    except BaseException as exc:
        run.fail(exc)
        raise as_failure(exc, f"{asset.job_name} [{key}]") from None
    yield from weak_report(context, run, results, report=single)
    yield from later_report(context, run, later)
    context.log.info(f"{asset.job_name} [{key}]: {staged.row_count} rows published ({staged.label})")
    return staged.row_count, results, out.schema


def _metadata(
    asset: AssetPublish, tables: IcebergTables | None, done, schema, results, single: bool
) -> dict[str, Any]:
    meta: dict[str, Any] = {"dagster/table_name": asset.target.qualified, **score_metadata(results)}
    if single and done:
        rows = done[0][1]
        meta.update({"dagster/row_count": rows, "dagster/partition_row_count": rows})
    else:
        meta.update({"partitions_published": len(done), "rows_by_partition": MetadataValue.json(dict(done))})
    if schema is not None:
        meta["dagster/column_schema"] = TableSchema(
            columns=[TableColumn(f.name, f.dataType.simpleString()) for f in schema.fields]
        )
    if done and tables is not None:
        meta["snapshot_id"] = str(tables.current_snapshot_id(asset.target))
    return meta


def already_done(asset: AssetPublish, period: Period) -> bool:
    """Is this period's latest attempt SUCCESS in the job log? (A relaunched backfill resumes after it.)"""
    latest = job_log_or_fail().latest_attempts(asset.job_name, starts=[period.range_start])
    attempt = latest.get(period.range_start)
    return attempt is not None and attempt.status == SUCCESS
