"""The code location: SQL tables, the CDC path, data-quality checks, resources, jobs and sensors.

Everything is derived at load time from the files under `sharp_dagster/warehouse/` (or `SHARP_WAREHOUSE_SQL_DIR`):
`dwd/` and `ads/` SQL files, `cdc/*.yaml` sources (landing + ODS merge assets), `quality/*.yaml` rules. Loading
fails, naming the file, when a SQL file does not parse, its declared deps disagree with its SQL, or a rule is
invalid.
"""

from __future__ import annotations

import re

from dagster import (
    AssetKey,
    AssetSelection,
    Definitions,
    ScheduleDefinition,
    define_asset_job,
    in_process_executor,
)

from sharp_dagster.assets.cdc_assets import build_landing_asset, source_specs
from sharp_dagster.assets.lineage_meta import governance_check, lineage_metadata, with_explorer_links
from sharp_dagster.assets.ods_source import build_ods_source_asset, source_job_name
from sharp_dagster.assets.ods_upkeep import GROUP as UPKEEP_GROUP
from sharp_dagster.assets.ods_upkeep import build_ods_upkeep_asset
from sharp_dagster.assets.quality import load_project_rules
from sharp_dagster.assets.sql_assets import build_sql_asset, external_asset_specs
from sharp_dagster.lineage.governance import check as governance_check_tables
from sharp_dagster.naming import key_str, parts
from sharp_dagster.partitions import partitions_for
from sharp_dagster.resources.io_manager import SparkTableIOManager
from sharp_dagster.resources.kafka import KafkaResource
from sharp_dagster.resources.spark import SparkResource
from sharp_dagster.sensors.cdc import build_kafka_sensor
from sharp_dagster.sensors.log_driven import build_log_driven_sensor
from sharp_dagster.settings import ods_upkeep_cron, warehouse_sql_dir
from sharp_dagster.warehouse.catalog import WarehouseDefinitionError
from sharp_dagster.warehouse.cdc_layout import START, landing_assets, landing_table, ods_tables, source_start
from sharp_dagster.warehouse.layout import layout
from sharp_dagster.warehouse.sources import physical_tables

LAYOUT = layout()  # the project's layout, built once (shared with the command line)
CATALOG = LAYOUT.catalog
DEPS = LAYOUT.deps
GRAINS = LAYOUT.grains

# Data-quality rules, validated now: a bad rule fails loading, naming its file and the rule.
RULES = load_project_rules(CATALOG, DEPS, warehouse_sql_dir() / "quality")
_known = {t.asset_key_str for t in CATALOG.tables} | {key_str(q) for q in CATALOG.other_assets}
if set(RULES) - _known:
    raise WarehouseDefinitionError(f"data-quality rules name unknown assets: {sorted(set(RULES) - _known)}")

# The warehouse's governance rules (`lineage/governance.py`) over what each table reads; offenders get a warning check.
VIOLATIONS: dict[str, list] = {}
for _v in governance_check_tables({q: d.assets + d.externals for q, d in DEPS.items()}):
    VIOLATIONS.setdefault(_v.table, []).append(_v)

sql_assets = [
    build_sql_asset(
        t,
        DEPS[t.qualified].assets,
        DEPS[t.qualified].externals,
        GRAINS,
        LAYOUT.log_assets[t.asset_key_str],
        metadata={
            **lineage_metadata(DEPS[t.qualified].lineage, t.qualified),
            "governance": "; ".join(v.message for v in VIOLATIONS.get(t.qualified, [])) or "ok",
        },
        rules=RULES.get(t.asset_key_str),
    )
    for t in CATALOG.tables
]
governance_checks = [
    governance_check(CATALOG.by_qualified()[q].asset_key_path, vs) for q, vs in sorted(VIOLATIONS.items())
]

# The CDC path: source tables (as `warehouse/cdc/*.yaml` declares them) -> hourly landing of the binlog topic
# -> daily merge into ODS.
cdc_source_assets = []
landing = []
for _source, _db, _topic in landing_assets():
    _specs = source_specs(physical_tables(_db), _db)
    cdc_source_assets += _specs
    landing.append(build_landing_asset(_source, _db, _topic, [s.key for s in _specs]))
# Each database's ODS tables as one subsettable multi-asset (`assets/ods_source.py`): a source's day is one run, each
# table still its own asset `ods/<table>`; and one job per database, `ods_<db>`, for that day.
_ods_by_db: dict[str, list] = {}
for _t in ods_tables():
    _ods_by_db.setdefault(_t.database, []).append(_t)
_ods_sources = {
    _db: build_ods_source_asset(_db, _ts, RULES, GRAINS, LAYOUT.log_assets)
    for _db, _ts in sorted(_ods_by_db.items())
}
ods_assets = list(_ods_sources.values())
# The log-driven sensor launches a database's pending ODS tables of one day as one run of its multi-asset.
TOGETHER = {t.asset_key_str: source_job_name(_db) for _db, _ts in _ods_by_db.items() for t in _ts}
ods_source_jobs = [
    define_asset_job(
        source_job_name(_db),
        selection=AssetSelection.assets(*_source.keys),
        partitions_def=_source.partitions_def,  # the source's one daily definition (`build_ods_source_asset`)
        description=f"The day of every ODS table of `{_db}` in one run (each table its own asset and checks).",
    )
    for _db, _source in _ods_sources.items()
]
# Compaction and tag/snapshot expiry of every ODS table (`assets/ods_upkeep.py`), on a schedule of their own.
upkeep_assets = [build_ods_upkeep_asset(t) for t in ods_tables()]
upkeep_job = define_asset_job(
    "ods_upkeep",
    selection=AssetSelection.groups(UPKEEP_GROUP),
    description="Compact the ODS tables and expire their day tags older than the retention.",
)
upkeep_schedule = ScheduleDefinition(
    name="ods_upkeep_schedule", job=upkeep_job, cron_schedule=ods_upkeep_cron(), execution_timezone="UTC"
)

source_assets = external_asset_specs(CATALOG, [e for d in DEPS.values() for e in d.externals])

# A source whose bootstrap put its start elsewhere has partitions of its own: its ODS and landing assets leave the
# warehouse-wide jobs (a job's assets share one partitions definition) for two jobs of their own.
_own_start = {
    src.source_id: source_start(src) for src, _, _ in landing_assets() if source_start(src) != START
}
_own_ods = {
    sid: [AssetKey(["ods", t.name]) for t in ods_tables() if t.source.source_id == sid] for sid in _own_start
}
_own_landing = {
    sid: [AssetKey(parts(landing_table(db))) for src, db, _ in landing_assets() if src.source_id == sid]
    for sid in _own_start
}
warehouse_job = define_asset_job(
    "warehouse_daily",
    selection=(AssetSelection.key_prefixes(["ods"]) | AssetSelection.groups("dwd", "ads"))
    - AssetSelection.assets(*[k for keys in _own_ods.values() for k in keys]),
    partitions_def=partitions_for("daily", START),
    description="Every daily warehouse table (ODS merge -> DWD -> ADS) for one day.",
)
landing_job = define_asset_job(
    "binlog_hourly",
    selection=AssetSelection.groups("cdc")
    - AssetSelection.assets(*[k for keys in _own_landing.values() for k in keys]),
    partitions_def=partitions_for("hourly", START),
    description="Land the binlog topics into the raw binlog tables (hourly).",
)
source_jobs = []
for _sid, _start in sorted(_own_start.items()):
    _name = re.sub(r"[^A-Za-z0-9_]", "_", _sid)
    source_jobs += [
        define_asset_job(
            f"ods_daily_{_name}",
            selection=AssetSelection.assets(*_own_ods[_sid]),
            partitions_def=partitions_for("daily", _start),
            description=f"The ODS merges of source {_sid} (from its bootstrap day {_start}) for one day.",
        ),
        define_asset_job(
            f"binlog_hourly_{_name}",
            selection=AssetSelection.assets(*_own_landing[_sid]),
            partitions_def=partitions_for("hourly", _start),
            description=f"Land the binlog topics of source {_sid} (hourly, from {_start}).",
        ),
    ]

# What the log-driven sensor plans: every asset whose job-log rows are periods.
LOG_ASSETS = LAYOUT.period_assets
_own_keys = {k.to_user_string() for keys in _own_ods.values() for k in keys}

spark = SparkResource()
defs = Definitions(
    assets=[
        *with_explorer_links([*cdc_source_assets, *source_assets, *landing, *ods_assets]),
        *sql_assets,
        *with_explorer_links(upkeep_assets),
    ],
    asset_checks=governance_checks,
    jobs=[warehouse_job, landing_job, upkeep_job, *source_jobs, *ods_source_jobs],
    schedules=[upkeep_schedule],
    sensors=[
        build_log_driven_sensor(
            {k: a for k, a in LOG_ASSETS.items() if k not in _own_keys}, together=TOGETHER
        ),
        *[
            build_log_driven_sensor(
                {k.to_user_string(): LOG_ASSETS[k.to_user_string()] for k in _own_ods[sid]},
                name=f"log_driven_sensor_{re.sub(r'[^A-Za-z0-9_]', '_', sid)}",
                together=TOGETHER,
            )
            for sid in sorted(_own_start)
        ],
        *[build_kafka_sensor(db, topic) for _, db, topic in landing_assets()],
    ],
    resources={
        "spark": spark,
        "kafka": KafkaResource(),
        "warehouse_io_manager": SparkTableIOManager(spark=spark),
    },
    executor=in_process_executor,
)
