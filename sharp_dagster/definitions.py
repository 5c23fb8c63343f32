"""The code location: every SQL table as an asset, the sources, resources, jobs and sensors."""

from __future__ import annotations

from dagster import AssetSelection, Definitions, define_asset_job, in_process_executor

from sharp_dagster.assets.lineage_meta import column_lineage, governance_check
from sharp_dagster.assets.quality import load_project_rules
from sharp_dagster.assets.sql_assets import (
    build_sql_asset,
    external_asset_specs,
    log_driven_spec,
    set_prepare_hook,
)
from sharp_dagster.lineage.governance import check as governance_check_tables
from sharp_dagster.partitions import partitions_for
from sharp_dagster.resources.io_manager import SparkTableIOManager
from sharp_dagster.resources.spark import SparkResource
from sharp_dagster.sensors.log_driven import build_log_driven_sensor
from sharp_dagster.settings import warehouse_sql_dir
from sharp_dagster.sources import SOURCE_SCHEMA, missing_source_days, register_sources
from sharp_dagster.warehouse.catalog import DEFAULT_START, WarehouseDefinitionError, load_catalog
from sharp_dagster.warehouse.dependencies import resolve


def _prepare_sources(context, table, spark_resource, partition_key: str) -> int:
    """ODS tables read the shop's files: register them, refuse a day whose change files are missing, and count
    the source rows the partition reads (snapshot + changes up to that day)."""
    from dagster import Failure

    from sharp_dagster.settings import Settings

    deps = DEPS[table.qualified]
    externals = [e for e in deps.externals if e.startswith(f"{SOURCE_SCHEMA}.")]
    if not externals:
        return 0
    sample = Settings.from_env().sample_dir
    missing = missing_source_days(sample, partition_key)
    if missing:
        raise Failure(
            description=f"{table.qualified}[{partition_key}]: source data missing: {', '.join(missing)}"
        )
    spark = spark_resource.session()
    register_sources(spark, sample)
    total = 0
    for name in externals:
        df = spark.table(name)
        total += (df.where(df.dt <= partition_key) if "dt" in df.columns else df).count()
    return total


CATALOG = load_catalog()
DEPS = resolve(CATALOG)
GRAINS = {t.qualified: t.grain for t in CATALOG.tables}
STARTS = {t.qualified: t.start for t in CATALOG.tables}

# Seed 004's governance rules over what each table reads; offenders get a warning check.
VIOLATIONS: dict[str, list] = {}
for _v in governance_check_tables({q: d.assets + d.externals for q, d in DEPS.items()}):
    VIOLATIONS.setdefault(_v.table, []).append(_v)

RULES = load_project_rules(CATALOG, DEPS, warehouse_sql_dir() / "quality")
unknown_assets = sorted(set(RULES) - {t.asset_key_str for t in CATALOG.tables})
if unknown_assets:  # load_rules already refuses them; this keeps the invariant explicit
    raise WarehouseDefinitionError(f"data-quality rules name unknown assets: {unknown_assets}")

set_prepare_hook(_prepare_sources)
sql_assets = [
    build_sql_asset(
        t,
        DEPS[t.qualified].assets,
        DEPS[t.qualified].externals,
        GRAINS,
        STARTS,
        metadata={
            "dagster/column_lineage": column_lineage(DEPS[t.qualified].lineage, t.qualified),
            "governance": "; ".join(v.message for v in VIOLATIONS.get(t.qualified, [])) or "ok",
        },
        rules=RULES.get(t.asset_key_str),
    )
    for t in CATALOG.tables
]
governance_checks = [
    governance_check(CATALOG.by_qualified()[q].asset_key_path, vs) for q, vs in sorted(VIOLATIONS.items())
]
LOG_ASSETS = {t.asset_key_str: log_driven_spec(t, GRAINS, STARTS) for t in CATALOG.tables}
UPSTREAMS = {t.asset_key_str: [u.replace(".", "/") for u in DEPS[t.qualified].assets] for t in CATALOG.tables}
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
    asset_checks=governance_checks,
    jobs=[warehouse_job],
    sensors=[build_log_driven_sensor(LOG_ASSETS, UPSTREAMS)],
    resources={"spark": spark, "warehouse_io_manager": SparkTableIOManager(spark=spark)},
    executor=in_process_executor,
)
