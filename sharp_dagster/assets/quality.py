"""Data-quality rules as Dagster asset checks: loaded and validated with the code location, run per partition.

Rules live in `warehouse/quality/*.yaml` (see `sharp_dagster.dqc.rules`). They are validated when the code location
loads, against each table's output columns (from its parsed SQL) and the known tables: an unknown asset, column,
template or comparator, or a parameter that is not a plain identifier fails loading, naming the file and the rule.

Each rule is an `AssetCheckSpec` of its asset (blocking for strong rules). At run time all rules of a partition
are evaluated in one scan of the *staged* rows (`evaluate`); strong failures keep the partition from being
published; weak results are reported (WARN) and alerted after it is published.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from dagster import AssetCheckResult, AssetCheckSeverity, AssetCheckSpec, AssetKey, MetadataValue

from sharp_dagster.dqc.context import RuleContext
from sharp_dagster.dqc.evaluate import RuleResult, quality_score
from sharp_dagster.dqc.rules import Rule, load_rules
from sharp_dagster.naming import key_str, parts
from sharp_dagster.redact import scrub_text
from sharp_dagster.spark.iceberg import IcebergTables
from sharp_dagster.spark.tables import TableRef
from sharp_dagster.spark.wap import StagedPartition
from sharp_dagster.spark.wap_range import StagedRange
from sharp_dagster.warehouse.catalog import WarehouseCatalog, WarehouseDefinitionError
from sharp_dagster.warehouse.dependencies import TableDeps
from sharp_dagster.warehouse.variables import window_variables


def output_columns(deps: TableDeps, qualified: str) -> dict[str, str]:
    """A table's output columns (types unknown before Spark runs: the rules check names)."""
    cols: dict[str, str] = {}
    for col in deps.lineage.columns if deps.lineage else ():
        table, _, name = col.target.rpartition(".")
        if table == qualified and name != "*":
            cols[name] = ""
    return cols


def load_project_rules(
    catalog: WarehouseCatalog, deps: Mapping[str, TableDeps], quality_dir: Path
) -> dict[str, list[Rule]]:
    """Every rule of the project by asset (`layer/table`); raises WarehouseDefinitionError on a bad rule."""
    if not quality_dir.is_dir():
        return {}
    schemas = {t.asset_key_str: output_columns(deps[t.qualified], t.qualified) for t in catalog.tables}
    for qualified in catalog.other_assets:  # tables built by the CDC path
        schemas[key_str(qualified)] = dict(catalog.external_schemas.get(qualified, {}))
    known = {name: cols for name, cols in catalog.external_schemas.items() if ":" not in name}
    try:
        rules = load_rules(quality_dir, schemas, known)
    except ValueError as exc:  # RuleError names the YAML file and the rule
        raise WarehouseDefinitionError(f"data-quality rules: {exc}") from exc
    by_asset: dict[str, list[Rule]] = {}
    for rule in rules:
        by_asset.setdefault(rule.asset, []).append(rule)
    return by_asset


def check_specs(asset_key_path: list[str], rules: list[Rule], partitions_def) -> list[AssetCheckSpec]:
    return [
        AssetCheckSpec(
            name=rule.id,
            asset=AssetKey(asset_key_path),
            blocking=rule.severity == "strong",
            description=f"[{rule.severity}, {rule.dimension}] {rule.description or rule.template}: "
            f"{rule.describe_expectation()}",
            partitions_def=partitions_def,
            metadata={"template": rule.template, "severity": rule.severity, "source": rule.source},
        )
        for rule in rules
    ]


def _register_other_tables(store: IcebergTables, rules: list[Rule], grains: Mapping[str, str]) -> None:
    """Tables that referential/reconciliation rules compare with must be resolvable in the session."""
    from sharp_dagster.periods import PARTITION_COLUMNS

    for rule in rules:
        for other in (rule.params.get("other"), *rule.reads):  # `reads:` of custom_sql rules too
            if isinstance(other, str) and other in grains:
                db, name = parts(other)
                store.register(TableRef(db, name, PARTITION_COLUMNS[grains[other]]), refresh=True)


def evaluate(
    run: Any,
    store: IcebergTables,
    staged: StagedPartition,
    rules: list[Rule],
    grain: str,
    grains: Mapping[str, str],
) -> list[RuleResult]:
    """All rules of one staged partition in one scan, recorded as the job log's `checks` step and in dqc_result."""
    from sharp_dagster.dqc.runner import RuleRunner
    from sharp_dagster.dqc.store import DqcStore

    key = run.handle.partition_key
    ctx = _rule_context(run, staged, grain)
    with run.step("checks", source_type="spark") as rec:
        _register_other_tables(store, rules, grains)
        runner = RuleRunner(store.spark, store=DqcStore(run.job_log.engine))
        results = runner.run(run.asset.job_name, key, store.read_staged(staged), rules, ctx)
        _record(rec, staged, results)
    return results


def evaluate_range(
    runs: Sequence[Any],
    store: IcebergTables,
    staged: StagedRange,
    rules: list[Rule],
    grain: str,
    grains: Mapping[str, str],
) -> list[list[RuleResult]]:
    """`evaluate` for every period of a staged range (`runs[i]` staged `staged.parts[i]`), oldest first, each its
    own `checks` step and `dqc_result` rows; the single-table rules of all periods in one grouped scan. Stops after
    the first period whose strong rules fail: fewer lists than runs come back then."""
    from sharp_dagster.dqc.runner import RuleRunner, blocking_failures
    from sharp_dagster.dqc.store import DqcStore

    with ExitStack() as steps:
        recs = [steps.enter_context(run.step("checks", source_type="spark")) for run in runs]
        _register_other_tables(store, rules, grains)
        runner = RuleRunner(store.spark, store=DqcStore(runs[0].job_log.engine))
        rows, frames = store.read_staged_range(staged)
        partitions = [
            (run.handle.partition_key, df, _rule_context(run, part, grain))
            for run, part, df in zip(runs, staged.parts, frames, strict=True)
        ]
        results = runner.run_range(
            runs[0].asset.job_name,
            partitions,
            rows,
            staged.ref.partition_cols,
            [tuple(v for _, v in part.values) for part in staged.parts],
            rules,
            stop=lambda found: bool(blocking_failures(found)),
        )
        for rec, part, found in zip(recs, staged.parts, results, strict=False):
            _record(rec, part, found)
    return results


def _rule_context(run: Any, staged: StagedPartition, grain: str) -> RuleContext:
    key = run.handle.partition_key
    variables = window_variables(key, grain)
    return RuleContext(
        partition_key=key,
        dt=variables["dt"],
        data_range_start=variables["DATA_RANGE_START"],
        data_range_end=variables["DATA_RANGE_END"],
        run_id=run.run_id,
        source_count=run.source_count,
        target_count=staged.row_count,
    )


def _record(rec: Any, staged: StagedPartition, results: list[RuleResult]) -> None:
    """The `checks` step's counts and one line per rule."""
    rec.source_count = staged.row_count
    rec.success_count = sum(1 for r in results if r.passed)
    rec.failure_count = sum(1 for r in results if not r.passed)
    for r in results:
        rec.info(f"[{r.severity}] {r.rule_id}: {r.status} ({r.message})")


def check_result(asset_key: AssetKey, r: RuleResult) -> AssetCheckResult:
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
    return AssetCheckResult(
        asset_key=asset_key,
        check_name=r.rule_id,
        passed=bool(r.passed),
        severity=AssetCheckSeverity.ERROR
        if r.severity == "strong" and not r.downgraded
        else AssetCheckSeverity.WARN,
        description=scrub_text(r.message),
        metadata={k: v for k, v in metadata.items() if v is not None},
    )


def score_metadata(results: list[RuleResult]) -> dict[str, Any]:
    score = quality_score(results)
    if not score:
        return {}
    return {"dqc/quality_score": MetadataValue.json(score)}


def alert(results: list[RuleResult], engine) -> int:
    from sharp_dagster.alerts import AlertSink
    from sharp_dagster.dqc.runner import alert_failures

    return alert_failures(results, AlertSink.from_env(engine=engine))
