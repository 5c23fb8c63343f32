"""A range run of a log-driven asset (a SQL table, an ODS merge) as one batch: every pending period claimed, ONE write, ONE audit pass, ONE publish.

A single-run backfill hands one Dagster run a range of partitions. Going through the lifecycle (`materialize.py`)
one period at a time pays its fixed costs (branch cut, write, snapshot commits, rule scans, publish) per period.
`materialize_range` pays them once per range, with the same guarantees per period:

1. **check, claim, gate** per period, oldest first: each period keeps its own job_log row, run id, fencing token and
   heartbeat (`PartitionRun`). The order check accepts the earlier periods of this batch, which this run holds
   RUNNING (`check_ordered(held=...)`); any other run's claim or a failed/never-run period still blocks.
2. **compute** each period's rows (its rendered SQL, as a single run), then **stage** them all in one Iceberg write
   on one branch (`IcebergTables.stage_range`: a dynamic partition overwrite; a period with no rows replaces its
   partition with nothing). Rows per period come from the written files' metadata. An asset that stages its
   periods itself (`AssetPublish.stage_range`: an ODS merge) does it instead: the batch's days merged one after
   the other on one branch (`cdc/ods/stage.py`), each period's part being its day's snapshot.
3. **strong rules** per period against the branch (each period's rows, its own context and `dqc_result` rows;
   the single-table rules of all periods in one grouped scan: `rules.evaluate_range`; an ODS day's rules against
   its day's snapshot), then against every later period the batch re-publishes (`later.py`).
4. **fence** every token in one job-log transaction (`JobLog.assert_current_all`), **publish** the staged range in
   one commit (an ODS batch: one fenced move of `main` and one tag per day), mark every period SUCCESS, then report
   the weak rules.

Any failure before the publish (a strong rule, a SQL error, a refused claim or gate, a lost claim, a stale publish)
drops the branch (nothing was published), withdraws the batch's claims (`JobLog.withdraw`: as if never claimed)
and returns None: the caller then runs the range one period at a time, which publishes the periods before the bad
one, records the bad one FAILURE naming its error, and never runs the later ones: exactly a sequential run's
outcome. An interrupt (not an `Exception`) records FAILURE on every claimed period instead, as a single run does.
"""

from __future__ import annotations

import logging
from contextlib import ExitStack
from typing import Any

from sharp_dagster.dqc.runner import failed_rule_names
from sharp_dagster.failpoints import failpoint
from sharp_dagster.joblog import Period
from sharp_dagster.lineage import openlineage
from sharp_dagster.publish.failures import as_failure, error_text
from sharp_dagster.publish.later import audit_later, first_failed
from sharp_dagster.publish.rules import evaluate_range, weak_report
from sharp_dagster.publish.run import AssetPublish, PartitionRun, dead_branches
from sharp_dagster.publish.warehouse import RunWarehouse
from sharp_dagster.redact import scrub_text
from sharp_dagster.spark.iceberg import IcebergTables
from sharp_dagster.spark.tables import TableRef
from sharp_dagster.spark.wap import branch_name
from sharp_dagster.spark.wap_range import StagedRange

log = logging.getLogger(__name__)


class BatchAbandoned(RuntimeError):
    """The batch publishes nothing; the range is run one period at a time instead."""


def materialize_range(
    context: Any, asset: AssetPublish, store: RunWarehouse, periods: list[Period]
) -> tuple[list[tuple[str, int]], list, Any, tuple] | None:
    """Publish the pending `periods` (oldest first) as one batch; returns `(done, last results, schema, (last run,
    the later periods it re-published: `later.LaterAudit`s))`, or None when the batch was abandoned with nothing
    published (the caller then runs them one by one). The warehouse opens at the first claim (`store`)."""
    runs: list[PartitionRun] = []
    branch: str | None = None
    staged = None
    target = asset.target
    tables: IcebergTables | None = None
    try:
        frames = []
        held: dict[str, str] = {}
        with ExitStack() as once:
            for period in periods:
                run = PartitionRun.begin(context, asset.log_asset, period, store, held=held, in_batch=True)
                if tables is None:  # the upstream tables' partition metadata, read once for the range
                    tables = run.tables
                    once.enter_context(tables.counts_read_once())
                runs.append(run)
                held[run.handle.range_start] = str(run.run_id)
                if asset.stage_range is None:
                    frames.append((run.values, asset.compute(period, run), str(run.handle.token)))
        branch = branch_name(f"{runs[0].key}_{runs[-1].key}_{runs[0].handle.token}_{len(runs)}")
        if asset.stage_range is not None:
            staged = asset.stage_range(runs, branch)
        else:
            staged = _stage(runs, target, frames, tables, branch)
        results, later = _audit(runs, staged, tables, asset)
        failpoint("after_audit", quiet=runs[-1].between_beats())
        _publish(runs, staged, tables)
    except Exception as exc:  # nothing is published: withdraw, and let the caller run the periods one by one
        _abandon(context, asset, runs, staged, branch, tables, exc)
        return None
    except BaseException as exc:  # an interrupt: every claimed period ends FAILURE, as a single run's would
        _discard(tables, target, staged, branch)
        for run in runs:
            run.fail(exc)
        raise
    failpoint("after_publish", quiet=runs[-1].between_beats())
    schema = frames[-1][1].schema if frames else staged.parts[-1].schema
    return (*_finish(context, runs, staged, results, schema), (runs[-1], later))


def _stage(
    runs: list[PartitionRun], target: TableRef, frames: list, tables: IcebergTables, branch: str
) -> StagedRange:
    """The `write` step of every period around ONE write of the whole range on one branch."""
    with ExitStack() as steps:
        recs = [
            steps.enter_context(run.step("write", source_type="spark", target_type="iceberg")) for run in runs
        ]
        drop_orphans(tables, target, runs, branch, recs[0])
        staged = tables.stage_range(target, frames, branch=branch, properties=_properties(runs))
        for run, rec, part, (_, df, _) in zip(runs, recs, staged.parts, frames, strict=True):
            run.output_fields = openlineage.schema_fields(df)  # the written schema, for the COMPLETE event
            rec.target_count = rec.success_count = part.row_count
            rec.source_count = run.source_count
            rec.info(
                f"staged {part.row_count} rows for {target.qualified} {part.values_dict} on {branch} "
                f"(one write of {len(runs)} partitions)"
            )
    return staged


def drop_orphans(tables: IcebergTables, ref: TableRef, runs: list[PartitionRun], branch: str, rec) -> None:
    """Drop the staging branches of `ref` the batch's claims prove dead, saying so in `rec`."""
    orphans = dead_branches(tables, ref, runs, branch)
    if orphans:
        tables.drop_branches(ref, orphans)
        rec.info(
            f"dropped {len(orphans)} staging branch(es) of dead attempts on {ref.qualified}: {', '.join(orphans)}"
        )


def _properties(runs: list[PartitionRun]) -> dict[str, str]:
    """What the table's history shows about the batch's commits (`sharp.<key>`): every period's attempt."""
    first, last = runs[0], runs[-1]
    return {
        **last.properties(),
        "partition": f"{first.key}..{last.key}",
        "partitions": str(len(runs)),
        "attempt": ",".join(str(run.handle.attempt) for run in runs),
        "job_id": ",".join(run.handle.job_id for run in runs),
    }


def _audit(runs: list[PartitionRun], staged, tables: IcebergTables, asset: AssetPublish) -> tuple[list, list]:
    """Every period's rules against its rows on the branch, oldest first (`rules.evaluate_range`: one grouped
    scan), then those of the later periods the batch re-publishes (`later.py`, the last run's `checks_later`
    step); `BatchAbandoned` at the first period whose strong rules fail (the sequential run then records it)."""
    out = (
        evaluate_range(runs, tables, staged, asset.rules, asset.grains) if asset.rules else [[] for _ in runs]
    )
    if asset.audit is not None:
        for run, part, results in zip(runs, staged.parts, out, strict=False):
            results += asset.audit(run, part)
    for run, results in zip(runs, out, strict=False):
        names = failed_rule_names(results)
        if names:
            raise BatchAbandoned(f"{run.asset.job_name} [{run.key}]: strong rule(s) failed: {names}")
    later = audit_later(runs[-1], tables, staged, asset)
    bad = first_failed(later)
    if bad is not None:
        names = failed_rule_names(bad.results)
        raise BatchAbandoned(
            f"{asset.job_name} [{runs[-1].key}]: the re-published later day {bad.key}: strong rule(s) failed: "
            f"{names}"
        )
    return out, later


def _publish(runs: list[PartitionRun], staged, tables: IcebergTables) -> None:
    """Fence every period's token in one transaction, then put the whole range on `main` in one commit (a
    `StagedRange`'s cherry-pick, an ODS batch's fenced move of `main` and day tags)."""
    with ExitStack() as steps:
        recs = [steps.enter_context(run.step("publish", target_type="iceberg")) for run in runs]
        runs[0].job_log.assert_current_all([run.handle for run in runs])
        snapshot = staged.publish(tables)
        for rec, part in zip(recs, staged.parts, strict=True):
            rec.target_count = part.row_count
            rec.info(
                f"published {part.label} as snapshot {snapshot} (one commit of {len(staged.parts)} partitions)"
            )


def _finish(context, runs, staged, results: list[list], schema) -> tuple:
    """SUCCESS for every period (the range is on `main`: no fallback past this point), then the weak rules."""
    errors = []
    for run in runs:
        try:
            run.succeed()
        except Exception as exc:  # the claim was lost after the publish: the job log cannot say SUCCESS
            errors.append((run, exc))
    if errors:
        run, exc = errors[0]
        for other, _ in errors:
            other.fail(exc)
        raise as_failure(exc, f"{run.asset.job_name} [{run.key}]") from None
    done = []
    for run, part, res in zip(runs, staged.parts, results, strict=True):
        for _ in weak_report(context, run, res, report=False):
            pass  # a range run reports its last period's checks once, at the end (`materialize_partitions`)
        done.append((run.key, part.row_count))
        context.log.info(f"{run.asset.job_name} [{run.key}]: {part.row_count} rows published")
    return done, results[-1], schema


def _discard(tables: IcebergTables, target: TableRef, staged, branch: str | None) -> None:
    """Drop what the batch staged, or its branch of the target if it was cut before anything was staged."""
    try:
        if staged is not None:
            staged.discard(tables)
        elif branch is not None and tables.exists(target):
            tables.drop_branches(target, [branch])
    except Exception:  # the next run of the table drops it as an orphan
        log.warning("could not drop staging branch %s of %s", branch, target.qualified)


def _abandon(context, asset: AssetPublish, runs, staged, branch: str | None, tables, exc) -> None:
    """Drop the batch's branch and withdraw every claim of the batch; say why in the run's log."""
    _discard(tables, asset.target, staged, branch)
    for run in runs:
        run.withdraw()
    reason = exc if isinstance(exc, BatchAbandoned) else scrub_text(error_text(exc))
    context.log.warning(
        f"{asset.job_name}: the range of {len(runs)} claimed period(s) was not published as one batch "
        f"({reason}); running it one period at a time"
    )
