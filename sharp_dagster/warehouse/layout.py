"""The project's layout, built once: the SQL catalog, what each table reads, every asset's grain and start, and
the log-driven assets with what the job log must know of each (periods, gated upstreams, readiness).

The Dagster definitions and the command line both take the layout from here (`layout()`), so the two cannot
disagree on which assets exist or how their periods run. Nothing here imports Dagster.

An asset is log-driven when its runs are claimed, gated and recorded in the job log: every SQL table (periods of its
grain; it gates every log-driven upstream it reads, `@lookback` included), every ODS merge (daily; a day is ready
once all its hourly done markers exist) and every landing (`original_binlog/<db>`: hourly partitions, but its job-log
rows are Kafka offset ranges, so no downstream gates on it by period and no period sensor launches it).
"""

from __future__ import annotations

from datetime import datetime
from functools import cache, cached_property

from sharp_dagster.joblog.models import KAFKA_OFFSET, TIMEWINDOW
from sharp_dagster.joblog.planner import LogDrivenAsset, UpstreamRead
from sharp_dagster.naming import key_str
from sharp_dagster.periods import PeriodSpec
from sharp_dagster.settings import Settings, warehouse_sql_dir
from sharp_dagster.warehouse.catalog import SqlTable, WarehouseCatalog, load_catalog
from sharp_dagster.warehouse.cdc_layout import (
    START,
    OdsTable,
    landing_assets,
    landing_table,
    ods_tables,
    source_start,
)
from sharp_dagster.warehouse.dependencies import TableDeps, resolve
from sharp_dagster.warehouse.sources import other_starts


class Layout:
    """The layout of the warehouse under one SQL folder; each part is computed on first use, then kept."""

    def __init__(self, catalog: WarehouseCatalog):
        self.catalog = catalog

    @cached_property
    def deps(self) -> dict[str, TableDeps]:
        """What each SQL table reads (qualified name -> upstream assets and external sources), from its SQL."""
        return resolve(self.catalog)

    @cached_property
    def grains(self) -> dict[str, str]:
        """Qualified name -> grain, of every asset (SQL tables and the CDC path's)."""
        return {**self.catalog.other_assets, **{t.qualified: t.grain for t in self.catalog.tables}}

    @cached_property
    def starts(self) -> dict[str, str]:
        """Qualified name -> first partition, of every asset."""
        return {
            **{q: other_starts().get(q, START) for q in self.catalog.other_assets},
            **{t.qualified: t.start for t in self.catalog.tables},
        }

    @cached_property
    def log_assets(self) -> dict[str, LogDrivenAsset]:
        """Every log-driven asset by `layer/table`: landings, ODS merges and SQL tables."""
        assets = {
            key_str(landing_table(db)): _landing(db, source_start(src)) for src, db, _ in landing_assets()
        }
        assets.update({t.asset_key_str: _ods(t) for t in ods_tables()})
        assets.update({t.asset_key_str: self.sql_log_asset(t) for t in self.catalog.tables})
        return assets

    @property
    def period_assets(self) -> dict[str, LogDrivenAsset]:
        """The log-driven assets whose job-log rows are periods (what the log-driven sensor plans)."""
        return {k: a for k, a in self.log_assets.items() if a.incremental_type == TIMEWINDOW}

    def sql_log_asset(self, table: SqlTable, reads: list[str] | None = None) -> LogDrivenAsset:
        """The job-log view of a SQL table that reads the asset tables `reads` (default: what its SQL reads)."""
        reads = self.deps[table.qualified].assets if reads is None else reads
        gated = {
            key_str(up): UpstreamRead(_spec(self.grains[up], self.starts[up]), table.lookback.get(up, 0))
            for up in reads
            if up in self.grains and up not in self.landing_tables
        }
        return LogDrivenAsset(table.asset_key_str, _spec(table.grain, table.start), upstream=gated)

    @cached_property
    def landing_tables(self) -> set[str]:
        """The raw binlog tables: their job-log rows are offset ranges, not periods, so no reader gates on them."""
        return {landing_table(db) for _, db, _ in landing_assets()}


def _spec(grain: str, start: str) -> PeriodSpec:
    return PeriodSpec(grain, datetime.fromisoformat(start))


def _landing(database: str, start: str) -> LogDrivenAsset:
    return LogDrivenAsset(
        key_str(landing_table(database)), _spec("hourly", start), incremental_type=KAFKA_OFFSET
    )


def _ods(t: OdsTable) -> LogDrivenAsset:
    database = t.database

    def ready(period) -> str | None:
        # Not at the top: the done markers reach the warehouse through Spark's file system (`spark/filesystem.py`),
        # which loads pyspark; `sharp-dagster log status` imports this module and must start without Spark.
        from sharp_dagster.cdc.landing.done_markers import day_complete

        day = period.partition_key
        if day_complete(Settings.from_env().warehouse_dir, database, day):
            return None
        return f"the binlog of {day} has not fully landed (done markers incomplete)"

    return LogDrivenAsset(t.asset_key_str, _spec("daily", t.start), ready=ready)


@cache
def _layout(sql_dir: str) -> Layout:
    return Layout(load_catalog(sql_dir))


def layout() -> Layout:
    """The layout of the project's warehouse folder (`SHARP_WAREHOUSE_SQL_DIR` or the package's own)."""
    return _layout(str(warehouse_sql_dir()))
