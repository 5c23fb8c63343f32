"""One Dagster asset per SQL table file: key `[layer, table]`, group = layer, time-window partitioned.

The asset's upstream tables come from the SQL itself (parsed); a table that is an asset becomes an input loaded by
the warehouse IO manager (which checks that every upstream partition the mapping asks for exists), a table that is
not becomes an external source asset. The asset runs its SQL for one partition, variables substituted from the
partition window, and returns the DataFrame for the IO manager to publish.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from dagster import (
    AssetIn,
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

from sharp_dagster.joblog import SUCCESS, PeriodSpec
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


def input_name(qualified: str) -> str:
    return qualified.replace(".", "__")


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
) -> AssetsDefinition:
    """The asset of one SQL table; `upstream_assets` are qualified names of asset tables it reads."""
    starts = starts or {}
    _UPSTREAMS[table.qualified] = tuple(upstream_assets)
    ins = {}
    for up in upstream_assets:
        mapping = None
        if up in table.lookback:
            mapping = TimeWindowPartitionMapping(start_offset=-table.lookback[up], end_offset=0)
        elif grains.get(up, table.grain) != table.grain:
            mapping = TimeWindowPartitionMapping()
        ins[input_name(up)] = AssetIn(key=asset_key_of(up), partition_mapping=mapping)

    log_asset = log_driven_spec(table, grains, starts)

    @asset(
        name=table.name,
        key_prefix=[table.layer],
        group_name=table.layer,
        description=sql_description(table),
        partitions_def=partitions_for(table.grain, table.start),
        backfill_policy=BackfillPolicy.single_run(),
        ins=ins,
        deps=[asset_key_of(s) for s in external_sources],
        io_manager_key="warehouse_io_manager",
        required_resource_keys={"spark"},
        kinds={"spark", "sql"},
        metadata={
            "sql_file": MetadataValue.path(str(table.path)),
            "dagster/table_name": table.qualified,
            **{k: v for k, v in (metadata or {}).items() if v is not None},
        },
    )
    def _sql_asset(context, **inputs):  # no annotation: Dagster inspects it at runtime
        spark_resource = context.resources.spark
        keys = context.partition_keys
        if len(keys) == 1:
            # One partition: compute here, publish in the IO manager (which finds this run's PartitionRun).
            run = _begin(context, table, log_asset, keys[0], spark_resource)
            try:
                with run.step("read", source_type="parquet") as rec:
                    rec.source_count = run.source_count = sum(
                        df.count() for df in inputs.values()
                    ) + _prepare(context, table, spark_resource, keys[0])
                yield Output(_transform(context, run, table, keys[0], spark_resource))
            except BaseException as exc:
                run.fail(exc)
                raise
            return
        # A range (a single-run backfill): partitions strictly oldest first, each published on its own; at the
        # first failure the later ones never run, and the ones already published are reported as materialized.
        # Partitions already SUCCESS are skipped unless the run is a refresh, so a relaunch resumes at the failure.
        store = spark_resource.store()
        ref = table_ref_for(table.asset_key_path, table.grain)
        done: list[tuple[str, int]] = []
        refresh = context.run.tags.get(REFRESH_TAG) == "true"
        for key in keys:
            if (
                not refresh
                and already_done(log_asset, key)
                and store.has_partition(ref, partition_values(key, table.grain))
            ):
                context.log.info(
                    f"{table.asset_key_str} [{key}]: SUCCESS in the job log, skipped (tag {REFRESH_TAG}=true to re-run)"
                )
                continue
            try:
                run = _begin(context, table, log_asset, key, spark_resource)
                try:
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
                except BaseException as exc:
                    run.fail(exc)
                    raise
                staged = run.publish(store, ref, partition_values(key, table.grain), df)
                done.append((key, staged.row_count))
                context.log.info(f"{table.asset_key_str} [{key}]: {staged.row_count} rows published")
            except BaseException:
                for done_key, rows in done:
                    yield AssetMaterialization(
                        asset_key=context.asset_key,
                        partition=done_key,
                        metadata={"dagster/row_count": rows, "dagster/partition_row_count": rows},
                    )
                raise
        yield Output(
            None,
            metadata={
                "partitions_published": len(done),
                "rows_by_partition": MetadataValue.json(dict(done)),
            },
        )

    return _sql_asset


def _begin(context, table: SqlTable, log_asset: LogDrivenAsset, key: str, spark_resource) -> PartitionRun:
    app_id = spark_resource.session().sparkContext.applicationId
    return PartitionRun.begin(context, log_asset, key, application_id=app_id)


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
            raise Failure(
                description=f"{table.qualified}: the SQL of {table.path} failed for {key}: {exc}"
            ) from exc


def log_driven_spec(table: SqlTable, grains: dict[str, str], starts: dict[str, str]) -> LogDrivenAsset:
    """The job-log view of a SQL table; upstreams of another grain are checked with `checkdone`."""
    spec = PeriodSpec(table.grain, datetime.fromisoformat(table.start))
    other = {
        up.replace(".", "/"): PeriodSpec(grains[up], datetime.fromisoformat(starts[up]))
        for up in grains
        if up in _UPSTREAMS.get(table.qualified, ()) and grains[up] != table.grain
    }
    return LogDrivenAsset(job_name=table.asset_key_str, spec=spec, upstream=other)


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
