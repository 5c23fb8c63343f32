"""One Dagster asset per SQL table file: key `[layer, table]`, group = layer, time-window partitioned.

The asset's upstream tables come from the SQL itself (parsed); a table that is an asset becomes a partition-mapped
dependency, a table that is not becomes an external source asset. Upstream partitions are not loaded by the IO
manager before the run starts: the run lifecycle first claims the period and passes the upstream gate (every
upstream period it reads SUCCESS in the job log), then its `read` step reads them (a missing one fails, named).
The asset runs its SQL for one partition, variables substituted from the partition window, and returns the
DataFrame for the IO manager to publish.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from dagster import (
    AssetDep,
    AssetKey,
    AssetMaterialization,
    AssetsDefinition,
    AssetSpec,
    BackfillPolicy,
    Failure,
    MetadataValue,
    Output,
    TimeWindowPartitionMapping,
    asset,
)

from sharp_dagster.assets import lineage_runtime, quality
from sharp_dagster.dqc.runner import BlockingFailure, blocking_failures
from sharp_dagster.joblog import SUCCESS, PeriodSpec
from sharp_dagster.joblog.planner import UpstreamRead
from sharp_dagster.joblog.redact import scrub_text
from sharp_dagster.logdriven import REFRESH_TAG, LogDrivenAsset, PartitionRun, job_log_or_fail
from sharp_dagster.partitions import partition_values, partitions_for
from sharp_dagster.resources.io_manager import table_ref_for
from sharp_dagster.settings import Settings
from sharp_dagster.warehouse.catalog import SqlTable, WarehouseCatalog
from sharp_dagster.warehouse.variables import Window

# Run in the read step: (context, table, spark resource, partition key) -> rows read from external sources.
# Registers the external source tables and refuses a partition whose source data is missing.
PrepareHook = Callable[[object, SqlTable, object, str], int]
_PREPARE: PrepareHook | None = None
_UPSTREAMS: dict[str, tuple[str, ...]] = {}


def set_prepare_hook(hook: PrepareHook | None) -> None:
    global _PREPARE
    _PREPARE = hook


def asset_key_of(qualified: str) -> AssetKey:
    return AssetKey(qualified.split("."))


def sql_description(table: SqlTable) -> str:
    """The table's description followed by its SQL, as the UI shows it."""
    return f"{table.description}\n\n```sql\n{table.sql.strip()}\n```"


def build_sql_asset(
    table: SqlTable,
    upstream_assets: list[str],
    external_sources: list[str],
    grains: dict[str, str],
    starts: dict[str, str] | None = None,
    metadata: dict | None = None,
    rules: list | None = None,
) -> AssetsDefinition:
    """The asset of one SQL table; `upstream_assets` are qualified names of asset tables it reads."""
    starts = starts or {}
    _UPSTREAMS[table.qualified] = tuple(upstream_assets)
    deps = []
    for up in upstream_assets:
        mapping = None
        if up in table.lookback:
            mapping = TimeWindowPartitionMapping(start_offset=-table.lookback[up], end_offset=0)
        elif grains.get(up, table.grain) != table.grain:
            mapping = TimeWindowPartitionMapping()
        # A dependency, not an input: loading inputs would run before the claim and the upstream gate.
        deps.append(AssetDep(asset_key_of(up), partition_mapping=mapping))

    log_asset = log_driven_spec(table, grains, starts)
    rules = list(rules or [])
    partitions_def = partitions_for(table.grain, table.start)

    @asset(
        name=table.name,
        key_prefix=[table.layer],
        group_name=table.layer,
        description=sql_description(table),
        partitions_def=partitions_def,
        backfill_policy=BackfillPolicy.single_run(),
        check_specs=[
            *quality.check_specs(table.asset_key_path, rules, partitions_def),
            *lineage_runtime.check_specs(table.asset_key_path, partitions_def),
        ],
        deps=[*deps, *(asset_key_of(s) for s in external_sources)],
        io_manager_key="warehouse_io_manager",
        required_resource_keys={"spark"},
        kinds={"spark", "sql"},
        metadata={
            "sql_file": MetadataValue.path(str(table.path)),
            "dagster/table_name": table.qualified,
            **{k: v for k, v in (metadata or {}).items() if v is not None},
        },
    )
    def _sql_asset(context):  # no annotation: Dagster inspects it at runtime
        # The read step checks that every upstream partition exists; the SQL reads the tables.
        spark_resource = context.resources.spark
        store = spark_resource.store()
        runtime_check = lineage_runtime.RuntimeLineageCheck(table)

        def compute(key: str, run: PartitionRun):
            with run.step("read", source_type="parquet") as rec:
                frames = [
                    store.read_partitions(
                        table_ref_for(up.split("."), grains.get(up, table.grain)),
                        [
                            partition_values(k, grains.get(up, table.grain))
                            for k in upstream_keys(table, up, key, grains)
                        ],
                        needed_by=f"{table.asset_key_str}[{key}]",
                    )
                    for up in upstream_assets
                ]
                rec.source_count = run.source_count = sum(df.count() for df in frames) + _prepare(
                    context, table, spark_resource, key
                )
            df = _transform(context, run, table, key, spark_resource)
            runtime_check.observe(context, key, df)  # parsed lineage vs Spark's analyzed plan
            return df

        yield from run_partitions(
            context, table.asset_key_path, table.grain, log_asset, compute, rules, grains
        )
        yield from runtime_check.results(context.asset_key)

    return _sql_asset


def _begin(context, log_asset: LogDrivenAsset, key: str, spark_resource) -> PartitionRun:
    app_id = spark_resource.session().sparkContext.applicationId
    return PartitionRun.begin(context, log_asset, key, application_id=app_id)


def run_partitions(context, asset_key_path, grain: str, log_asset: LogDrivenAsset, compute, rules, grains):
    """Materialize the run's partitions of one log-driven asset, strictly oldest first.

    `compute(key, run)` records its read/transform steps and returns the partition's DataFrame. Each partition is
    claimed, computed, staged, checked (all rules, one scan), and published only when no strong rule failed.
    One partition: the IO manager does the final swap (`Output(staged)`), then the weak rules are reported.
    A range (a single-run backfill): each partition is published here; at the first failure the later ones never
    run and the ones already published are reported as materialized. Partitions already SUCCESS are skipped
    unless the run is a refresh, so relaunching a failed backfill resumes at the failure.
    """
    spark_resource = context.resources.spark
    store = spark_resource.store()
    ref = table_ref_for(asset_key_path, grain)
    keys = context.partition_keys
    if len(keys) == 1:
        key = keys[0]
        run = _begin(context, log_asset, key, spark_resource)
        try:
            df = compute(key, run)
            if not rules:
                yield Output(df)
                return
            staged = run.stage(store, ref, partition_values(key, grain), df)
            results = quality.evaluate(run, store, staged, rules, grain, grains)
        except BaseException as exc:
            run.fail(exc)
            raise
        yield from _strong_gate(context, run, store, staged, results)
        yield Output(staged, metadata=quality.score_metadata(results))
        yield from _weak_report(context, run, results)
        return
    done: list[tuple[str, int]] = []
    last_results: list = []
    refresh = context.run.tags.get(REFRESH_TAG) == "true"
    for key in keys:
        if (
            not refresh
            and already_done(log_asset, key)
            and store.has_partition(ref, partition_values(key, grain))
        ):
            context.log.info(
                f"{log_asset.job_name} [{key}]: SUCCESS in the job log, skipped ({REFRESH_TAG}=true re-runs)"
            )
            continue
        try:
            run = _begin(context, log_asset, key, spark_resource)
            try:
                df = compute(key, run)
                staged = run.stage(store, ref, partition_values(key, grain), df)
                results = quality.evaluate(run, store, staged, rules, grain, grains) if rules else []
            except BaseException as exc:
                run.fail(exc)
                raise
            yield from _strong_gate(context, run, store, staged, results, report_passed=False)
            run.publish_staged(store, staged)
            list(_weak_report(context, run, results, report=False))
            last_results = results
            done.append((key, staged.row_count))
            context.log.info(f"{log_asset.job_name} [{key}]: {staged.row_count} rows published")
        except BaseException:
            for done_key, rows in done:
                yield AssetMaterialization(
                    asset_key=context.asset_key,
                    partition=done_key,
                    metadata={"dagster/row_count": rows, "dagster/partition_row_count": rows},
                )
            raise
    # One result per check for the run (the last partition's); every partition's results are in dqc_result.
    for result in last_results:
        yield quality.check_result(context.asset_key, result)
    yield Output(
        None,
        metadata={
            "partitions_published": len(done),
            "rows_by_partition": MetadataValue.json(dict(done)),
            **quality.score_metadata(last_results),
        },
    )


def _strong_gate(context, run: PartitionRun, store, staged, results, report_passed: bool = True):
    """Report the strong rules; when one failed, keep the staged rows out and fail the run naming it."""
    strong = [r for r in results if r.severity == "strong"]
    failed = blocking_failures(results)
    for r in strong:
        if report_passed or not r.passed:
            yield quality.check_result(context.asset_key, r)
    if failed:
        store.discard(staged)
        error = BlockingFailure(failed)
        quality.alert(failed, run.job_log.engine)
        run.fail(error)
        raise Failure(
            description=scrub_text(
                f"{run.asset.job_name} [{run.handle.partition_key}] not published: {error}"
            ),
            metadata={"failed_rules": [r.rule_id for r in failed]},
        )


def _weak_report(context, run: PartitionRun, results, report: bool = True):
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


def _prepare(context, table: SqlTable, spark_resource, key: str) -> int:
    return _PREPARE(context, table, spark_resource, key) if _PREPARE is not None else 0


def _transform(context, run: PartitionRun, table: SqlTable, key: str, spark_resource):
    with run.step("transform", source_type="spark") as rec:
        sql = table.render(key)
        rec.info(f"rendered {table.path.name} for {key}")
        context.log.debug(f"{table.qualified} [{key}]\n{sql}")
        try:
            return spark_resource.session().sql(sql)
        except Exception as exc:  # AnalysisException and friends: name the table and file
            raise Failure(  # the error text may quote a JDBC URL: scrubbed, and not chained (its text is raw)
                description=scrub_text(f"{table.qualified}: the SQL of {table.path} failed for {key}: {exc}")
            ) from None


# Layers whose job-log rows are Kafka offset ranges, not periods (the landing): not gated by period status.
OFFSET_DRIVEN_LAYERS = ("original_binlog",)


def log_driven_spec(table: SqlTable, grains: dict[str, str], starts: dict[str, str]) -> LogDrivenAsset:
    """The job-log view of a SQL table. Every upstream asset it reads with periods in the job log (SQL tables
    and ODS merges, any grain) is gated with its `@lookback`: see `planner.require_upstreams_done`."""
    spec = PeriodSpec(table.grain, datetime.fromisoformat(table.start))
    upstream = {
        up.replace(".", "/"): UpstreamRead(
            PeriodSpec(grains[up], datetime.fromisoformat(starts[up])), table.lookback.get(up, 0)
        )
        for up in _UPSTREAMS.get(table.qualified, ())
        if up in grains and up in starts and up.split(".")[0] not in OFFSET_DRIVEN_LAYERS
    }
    return LogDrivenAsset(job_name=table.asset_key_str, spec=spec, upstream=upstream)


def upstream_keys(table: SqlTable, upstream: str, key: str, grains: dict[str, str]) -> list[str]:
    """The upstream partition keys one partition reads: the same window (all its hours for an hourly upstream
    of a daily table), plus `@lookback` earlier partitions."""
    window = Window.from_partition_key(key, table.grain)
    up_grain = grains.get(upstream, table.grain)
    step = timedelta(days=1) if up_grain == "daily" else timedelta(hours=1)
    start = window.start - step * table.lookback.get(upstream, 0)
    fmt = "%Y-%m-%d" if up_grain == "daily" else "%Y-%m-%d-%H:%M"
    keys, cursor = [], start
    while cursor < window.end:
        keys.append(cursor.strftime(fmt))
        cursor += step
    return keys


def external_asset_specs(catalog: WarehouseCatalog, names: list[str]) -> list[AssetSpec]:
    specs = []
    for qualified in sorted(set(names)):
        schema = catalog.external_schemas.get(qualified, {})
        db = qualified.split(".")[0]
        specs.append(
            AssetSpec(
                key=asset_key_of(qualified),
                group_name="sources",
                description=f"External source table `{qualified}` (not written by this code location).",
                kinds={"source"},
                metadata={"dagster/table_name": qualified, "columns": ", ".join(schema)} if schema else None,
                tags={"layer": db},
            )
        )
    return specs


def sample_dir() -> str:
    return str(Settings.from_env().sample_dir)
