"""One Dagster asset per SQL table file: key `[layer, table]`, group = layer, time-window partitioned.

The asset's upstream tables come from the SQL itself (parsed); a table that is an asset becomes a partition-mapped
dependency, a table that is not becomes an external source asset. Upstream partitions are not loaded by the IO
manager before the run starts: the run lifecycle first claims the period and passes the upstream gate (every
upstream period it reads SUCCESS in the job log), then its `read` step checks them (a missing partition, or a
missing tag of an ODS day, fails, named).
The asset runs its SQL for one partition, variables substituted from the partition window; the rows go through the
one publish lifecycle (`sharp_dagster.publish`): staged, audited, fenced, published.
"""

from __future__ import annotations

from dagster import (
    AssetDep,
    AssetKey,
    AssetsDefinition,
    AssetSpec,
    BackfillPolicy,
    Failure,
    MetadataValue,
    TimeWindowPartitionMapping,
    asset,
)

from sharp_dagster.assets import lineage_runtime, quality
from sharp_dagster.cdc.ods.read import require_days
from sharp_dagster.joblog.planner import LogDrivenAsset
from sharp_dagster.naming import parts
from sharp_dagster.partitions import partitions_for
from sharp_dagster.periods import Period, period_values, periods_in_window
from sharp_dagster.publish.materialize import materialize_partitions
from sharp_dagster.publish.run import AssetPublish, PartitionRun
from sharp_dagster.redact import scrub_text
from sharp_dagster.resources.io_manager import table_ref_for
from sharp_dagster.warehouse.catalog import SqlTable, WarehouseCatalog
from sharp_dagster.warehouse.sources import day_tagged_tables


def asset_key_of(qualified: str) -> AssetKey:
    return AssetKey(parts(qualified))


def sql_description(table: SqlTable) -> str:
    """The table's description followed by its SQL, as the UI shows it."""
    return f"{table.description}\n\n```sql\n{table.sql.strip()}\n```"


def build_sql_asset(
    table: SqlTable,
    upstream_assets: list[str],
    external_sources: list[str],
    grains: dict[str, str],
    log_asset: LogDrivenAsset,
    metadata: dict | None = None,
    rules: list | None = None,
) -> AssetsDefinition:
    """The asset of one SQL table; `upstream_assets` are qualified names of asset tables it reads, `log_asset`
    its job-log view (the project's layout, `sharp_dagster.warehouse.layout`)."""
    deps = []
    for up in upstream_assets:
        mapping = None
        if up in table.lookback:
            mapping = TimeWindowPartitionMapping(start_offset=-table.lookback[up], end_offset=0)
        elif grains.get(up, table.grain) != table.grain:
            mapping = TimeWindowPartitionMapping()
        # A dependency, not an input: loading inputs would run before the claim and the upstream gate.
        deps.append(AssetDep(asset_key_of(up), partition_mapping=mapping))

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
        spark_resource = context.resources.spark
        runtime_check = lineage_runtime.RuntimeLineageCheck(table)

        def compute(period: Period, run: PartitionRun):
            key = period.partition_key
            with run.step("read", source_type="iceberg") as rec:
                # Every upstream partition must hold rows, every upstream ODS day must have its tag (a missing one
                # fails, named); the SQL reads the tables by name. The rows read are counted from the tables'
                # metadata, not by a scan.
                needed_by = f"{table.asset_key_str}[{key}]"
                rec.source_count = run.source_count = sum(
                    require_upstream(
                        run.tables, table, up, upstream_periods(table, up, period, grains), grains, needed_by
                    )
                    for up in upstream_assets
                )
            sql, df = _transform(context, run, table, period, spark_resource)
            runtime_check.observe(
                context, key, df, sql
            )  # parsed lineage vs Spark's analyzed plan of that SQL
            return df

        target = table_ref_for(table.asset_key_path, table.grain)
        publish = AssetPublish(target, table.grain, log_asset, compute, rules, grains)
        yield from materialize_partitions(context, publish, batch=True)
        yield from runtime_check.results(context.asset_key)

    return _sql_asset


def _transform(context, run: PartitionRun, table: SqlTable, period: Period, spark_resource):
    """The `transform` step: the table's SQL rendered once for `period`; (that SQL, its rows)."""
    key = period.partition_key
    with run.step("transform", source_type="spark") as rec:
        sql = table.render(period)
        rec.info(f"rendered {table.path.name} for {key}")
        context.log.debug(f"{table.qualified} [{key}]\n{sql}")
        try:
            return sql, spark_resource.session().sql(sql)
        except Exception as exc:  # AnalysisException and friends: name the table and file
            raise Failure(  # the error text may quote a JDBC URL: scrubbed, and not chained (its text is raw)
                description=scrub_text(f"{table.qualified}: the SQL of {table.path} failed for {key}: {exc}")
            ) from None


def require_upstream(
    tables, table: SqlTable, up: str, periods: list[Period], grains: dict[str, str], needed_by: str
) -> int:
    """The rows of the upstream periods one partition reads: a `dt` table's partitions, or an ODS table's day
    tags (`cdc.ods.read`: the SQL reads them `VERSION AS OF '${dt}'`)."""
    if up in day_tagged_tables():
        return require_days(tables, parts(up)[1], [p.partition_key for p in periods], needed_by=needed_by)
    grain = grains.get(up, table.grain)
    ref = table_ref_for(parts(up), grain)
    return tables.require_partitions(ref, [period_values(p) for p in periods], needed_by=needed_by)


def upstream_periods(table: SqlTable, upstream: str, period: Period, grains: dict[str, str]) -> list[Period]:
    """The upstream periods one partition reads: the same window (all its hours for an hourly upstream of a daily
    table), plus `@lookback` earlier partitions."""
    up_grain = grains.get(upstream, table.grain)
    return periods_in_window(period, up_grain, table.lookback.get(upstream, 0))


def external_asset_specs(catalog: WarehouseCatalog, names: list[str]) -> list[AssetSpec]:
    specs = []
    for qualified in sorted(set(names)):
        schema = catalog.external_schemas.get(qualified, {})
        db = parts(qualified)[0]
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
