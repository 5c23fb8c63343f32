"""The data-quality rules at run time: all rules of a staged partition evaluated in one scan (`evaluate`; a range
batch's periods in one grouped scan: `evaluate_range`), recorded as the job log's `checks` step and in
`dqc_result`; the strong rules gate the publish (`strong_gate`), the weak ones are reported and alerted after it
(`weak_report`). Their declaration half (loading, validating, check specs) is `assets/quality.py`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack
from functools import reduce
from typing import Any

from dagster import AssetCheckResult, AssetCheckSeverity, AssetKey, Failure, MetadataValue
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sharp_dagster.alerts import AlertSink
from sharp_dagster.dqc.context import RuleContext
from sharp_dagster.dqc.evaluate import RuleResult, quality_score
from sharp_dagster.dqc.rules import Rule
from sharp_dagster.dqc.runner import BlockingFailure, RuleRunner, alert_failures, blocking_failures
from sharp_dagster.dqc.store import DqcStore
from sharp_dagster.naming import parts
from sharp_dagster.periods import PARTITION_COLUMNS, Period
from sharp_dagster.publish.run import PartitionRun, Staged
from sharp_dagster.redact import scrub_text
from sharp_dagster.spark.iceberg import IcebergTables
from sharp_dagster.spark.one_task import one_task
from sharp_dagster.spark.tables import TableRef
from sharp_dagster.spark.wap_range import StagedRange
from sharp_dagster.warehouse.variables import period_variables

# A staged partition of at most this many rows is scanned by its rules as one Spark partition (`spark/one_task.py`).
SMALL_SCAN_ROWS = 100_000


def register_other_tables(store: IcebergTables, rules: list[Rule], grains: Mapping[str, str]) -> None:
    """Tables that referential/reconciliation rules compare with must be resolvable in the session."""
    for rule in rules:
        for other in (rule.params.get("other"), *rule.reads):  # `reads:` of custom_sql rules too
            if isinstance(other, str) and other in grains:
                db, name = parts(other)
                store.register(TableRef(db, name, PARTITION_COLUMNS[grains[other]]), refresh=True)


def evaluate(
    run: PartitionRun,
    store: IcebergTables,
    staged: Staged,
    rules: Sequence[Rule],
    grains: Mapping[str, str],
) -> list[RuleResult]:
    """All rules of one staged partition (or ODS day: its whole state at its snapshot) in one scan, recorded as the
    job log's `checks` step and in dqc_result."""
    key = run.handle.partition_key
    ctx = rule_context(run, staged)
    with run.step("checks", source_type="spark") as rec:
        register_other_tables(store, rules, grains)
        runner = RuleRunner(store.spark, store=DqcStore(run.job_log.engine))
        results = runner.run(run.asset.job_name, key, scanned(store, staged), rules, ctx)
        record_checks(rec, staged, results)
    return results


def scanned(store: IcebergTables, staged: Staged) -> DataFrame:
    """What the rules of one staged partition (or ODS day) scan: its rows, as one Spark partition when small."""
    return one_task(staged.read(store), staged.row_count <= SMALL_SCAN_ROWS)


def evaluate_range(
    runs: Sequence[PartitionRun],
    store: IcebergTables,
    staged: Any,
    rules: Sequence[Rule],
    grains: Mapping[str, str],
) -> list[list[RuleResult]]:
    """`evaluate` for every period of a staged range (`runs[i]` staged `staged.parts[i]`), oldest first, each its
    own `checks` step and `dqc_result` rows; the single-table rules of all periods in one grouped scan (`_grouped`:
    a `StagedRange`'s partitions, or the union of an ODS batch's day snapshots). Stops after the first period
    whose strong rules fail: fewer lists than runs come back then."""
    grouped = _grouped(store, staged)
    if grouped is None:
        results = []
        for run, part in zip(runs, staged.parts, strict=True):
            results.append(evaluate(run, store, part, rules, grains))
            if blocking_failures(results[-1]):
                break
        return results
    rows, frames, group_by, values = grouped
    with ExitStack() as steps:
        recs = [steps.enter_context(run.step("checks", source_type="spark")) for run in runs]
        register_other_tables(store, rules, grains)
        runner = RuleRunner(store.spark, store=DqcStore(runs[0].job_log.engine))
        partitions = [
            (run.handle.partition_key, df, rule_context(run, part))
            for run, part, df in zip(runs, staged.parts, frames, strict=True)
        ]
        results = runner.run_range(
            runs[0].asset.job_name,
            partitions,
            rows,
            group_by,
            values,
            rules,
            stop=lambda found: bool(blocking_failures(found)),
        )
        for rec, part, found in zip(recs, staged.parts, results, strict=False):
            record_checks(rec, part, found)
    return results


# The column telling apart the periods of a range whose parts are read one by one (`_grouped`).
PART_COLUMN = "__sharp_part"


def _grouped(
    store: IcebergTables, staged: Any
) -> tuple[DataFrame, list[DataFrame], list[str], list[tuple]] | None:
    """A staged range's rows as the rules' grouped scan reads them: (all rows, each part's, the columns telling
    the parts apart, each part's values of them). A `StagedRange`'s parts are partitions of its branch (read at
    once, told apart by their partition columns); other parts (an ODS batch's days: snapshots of one table) are
    each read as the single run reads them, and their union told apart by `PART_COLUMN`; None when their schemas
    differ (a day's DDL) or there is one part: each part is then scanned on its own, as a single run scans it."""
    if isinstance(staged, StagedRange):
        rows, frames = store.read_staged_range(staged)
        values = [tuple(v for _, v in part.values) for part in staged.parts]
        return rows, frames, list(staged.ref.partition_cols), values
    if len(staged.parts) < 2:
        return None
    frames = [scanned(store, part) for part in staged.parts]
    if len({tuple(df.schema) for df in frames}) > 1:
        return None
    tagged = [df.withColumn(PART_COLUMN, F.lit(str(i))) for i, df in enumerate(frames)]
    rows = reduce(DataFrame.unionByName, tagged)
    rows = one_task(rows, sum(part.row_count for part in staged.parts) <= SMALL_SCAN_ROWS)
    return rows, frames, [PART_COLUMN], [(str(i),) for i in range(len(frames))]


def rule_context(run: PartitionRun, staged: Staged, later: Period | None = None) -> RuleContext:
    """The rules' parameters of the run's period (`run.period`, parsed once when the run started); of the `later`
    period the run re-publishes, when given (its own key, dt, window and counts: `later.py`)."""
    period = later or run.period
    variables = period_variables(period)
    return RuleContext(
        partition_key=period.partition_key,
        dt=variables["dt"],
        data_range_start=variables["DATA_RANGE_START"],
        data_range_end=variables["DATA_RANGE_END"],
        run_id=run.run_id,
        source_count=getattr(staged, "source_count", None) if later else run.source_count,
        target_count=staged.row_count,
        period=period,
    )


def record_checks(rec: Any, staged: Staged, results: list[RuleResult]) -> None:
    """The `checks` step's counts and one line per rule."""
    rec.source_count = staged.row_count
    rec.success_count = sum(1 for r in results if r.passed)
    rec.failure_count = sum(1 for r in results if not r.passed)
    for r in results:
        rec.info(f"[{r.severity}] {r.rule_id}: {r.status} ({r.message})")


def check_result(asset_key: AssetKey, r: RuleResult) -> AssetCheckResult:
    return AssetCheckResult(asset_key=asset_key, check_name=r.rule_id, **check_fields(r))


def check_fields(r: RuleResult) -> dict[str, Any]:
    """What Dagster shows of a rule's result (passed, severity, description, metadata): an `AssetCheckResult` of
    the run's partition, or an `AssetCheckEvaluation` of a later partition it re-published (`later.py`)."""
    metadata: dict[str, Any] = {
        "partition": r.partition,
        "rule_version": r.rule_version,
        "template": r.template,
        "dimension": r.dimension,
        "severity": r.severity,
        "comparator": r.comparator,
        "actual": r.actual,
        "expected": r.expected,
        "lower_bound": r.lower_bound,
        "upper_bound": r.upper_bound,
        "status": r.status,
        "elapsed_ms": round(r.elapsed_ms, 1),
    }
    if r.downgraded:
        metadata["downgraded"] = r.downgrade_reason or "warning"
    if r.failing_keys:
        metadata["failing_keys"] = MetadataValue.json(r.failing_keys)
    metadata.update(r.details.get("metadata") or {})  # what a check shows beyond a rule's fields (ods_schema)
    return {
        "passed": bool(r.passed),
        "severity": AssetCheckSeverity.ERROR
        if r.severity == "strong" and not r.downgraded
        else AssetCheckSeverity.WARN,
        "description": scrub_text(r.message),
        "metadata": {k: v for k, v in metadata.items() if v is not None},
    }


def score_metadata(results: list[RuleResult]) -> dict[str, Any]:
    score = quality_score(results)
    if not score:
        return {}
    return {"dqc/quality_score": MetadataValue.json(score)}


def alert(results: list[RuleResult], engine) -> int:
    return alert_failures(results, AlertSink.from_env(engine=engine))


def strong_gate(
    context: Any, run: PartitionRun, results: list[RuleResult], report_passed: bool = True
) -> Iterator:
    """Report the strong rules; when one failed, keep the staged rows out and fail the run naming it."""
    strong = [r for r in results if r.severity == "strong"]
    failed = blocking_failures(results)
    for r in strong:
        if report_passed or not r.passed:
            yield check_result(context.asset_key, r)
    if failed:
        error = BlockingFailure(failed)
        alert(failed, run.job_log.engine)
        run.fail(error)
        raise Failure(
            description=scrub_text(f"{run.asset.job_name} [{run.key}] not published: {error}"),
            metadata={"failed_rules": [r.rule_id for r in failed]},
        )


def weak_report(context: Any, run: PartitionRun, results: list[RuleResult], report: bool = True) -> Iterator:
    """After publishing: report the weak rules (WARN) and alert the failed ones; never stops the pipeline."""
    weak = [r for r in results if r.severity != "strong"]
    if report:
        for r in weak:
            yield check_result(context.asset_key, r)
    failing = [r for r in weak if not r.passed]
    if failing:
        context.log.warning(
            f"{run.asset.job_name}: weak rules failed: " + "; ".join(r.message for r in failing)
        )
        alert(failing, run.job_log.engine)
