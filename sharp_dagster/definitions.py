"""The code location: every SQL table as an asset, the sources, resources, jobs and sensors."""

from __future__ import annotations

from dagster import AssetSelection, Definitions, define_asset_job, in_process_executor

from sharp_dagster.assets.sql_assets import build_sql_asset, external_asset_specs, set_prepare_hook
from sharp_dagster.partitions import partitions_for
from sharp_dagster.resources.io_manager import SparkTableIOManager
from sharp_dagster.resources.spark import SparkResource
from sharp_dagster.sources import SOURCE_SCHEMA, missing_source_days, register_sources
from sharp_dagster.warehouse.catalog import DEFAULT_START, load_catalog
from sharp_dagster.warehouse.dependencies import resolve


def _prepare_sources(context, table, spark_resource, partition_key: str) -> None:
    """ODS tables read the shop's files: register them, and refuse a day whose change files are missing."""
    from dagster import Failure

    from sharp_dagster.settings import Settings

    deps = DEPS[table.qualified]
    if not any(e.startswith(f"{SOURCE_SCHEMA}.") for e in deps.externals):
        return
    sample = Settings.from_env().sample_dir
    missing = missing_source_days(sample, partition_key)
    if missing:
        raise Failure(
            description=f"{table.qualified}[{partition_key}]: source data missing: {', '.join(missing)}"
        )
    register_sources(spark_resource.session(), sample)


CATALOG = load_catalog()
DEPS = resolve(CATALOG)
GRAINS = {t.qualified: t.grain for t in CATALOG.tables}
STARTS = {t.qualified: t.start for t in CATALOG.tables}

set_prepare_hook(_prepare_sources)
sql_assets = [
    build_sql_asset(t, DEPS[t.qualified].assets, DEPS[t.qualified].externals, GRAINS, STARTS)
    for t in CATALOG.tables
]
source_assets = external_asset_specs(CATALOG, [e for d in DEPS.values() for e in d.externals])

warehouse_job = define_asset_job(
    "warehouse_daily",
    selection=AssetSelection.groups("ods", "dwd", "ads"),
    partitions_def=partitions_for("daily", DEFAULT_START),
    description="Every daily warehouse table (ODS -> DWD -> ADS) for one day.",
)

spark = SparkResource()
defs = Definitions(
    assets=[*source_assets, *sql_assets],
    jobs=[warehouse_job],
    resources={"spark": spark, "warehouse_io_manager": SparkTableIOManager(spark=spark)},
    executor=in_process_executor,
)
