"""The ODS upkeep as Dagster assets: `ods_upkeep/<table>` (group `ods_upkeep`) compacts `ods.<table>` and
`ods_state.<table>` and expires their old day tags and snapshots (`cdc/ods/upkeep.py` decides what), on the
`ods_upkeep` schedule (`SHARP_ODS_UPKEEP_CRON`, UTC), keeping `SHARP_ODS_TAG_RETENTION_DAYS` days of tags.

Each run is a job-log attempt like any other (job name `ods_upkeep.<table>`, the day of the run as its period,
one step per table with the procedures' counts), so `sharp-dagster log` shows it; its claim, heartbeats and failure
(recorded scrubbed, alerted once, reaching Dagster as a `Failure`) go through the same lifecycle as the landing's
(`publish/claimed_range.py`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from dagster import AssetKey, AssetsDefinition, MaterializeResult, MetadataValue, asset

from sharp_dagster.cdc.ods.upkeep import ods_upkeep_refs, upkeep_table
from sharp_dagster.logdriven import job_log_or_fail
from sharp_dagster.publish.claimed_range import claimed_range
from sharp_dagster.settings import ods_compact_options, ods_tag_retention_days
from sharp_dagster.warehouse.cdc_layout import OdsTable

GROUP = "ods_upkeep"


@dataclass(frozen=True)
class UpkeepDay:
    """The job-log period of an upkeep run: the UTC day it runs on (a second run that day is its next attempt)."""

    day: date

    @property
    def range_start(self) -> str:
        return self.day.isoformat()

    @property
    def range_end(self) -> str:
        return (self.day + timedelta(days=1)).isoformat()

    @property
    def period_minutes(self) -> int:
        return 1440


def upkeep_job_name(table: str) -> str:
    return f"{GROUP}.{table}"


def build_ods_upkeep_asset(ods_table: OdsTable) -> AssetsDefinition:
    name = ods_table.name

    @asset(
        key=[GROUP, name],
        group_name=GROUP,
        description=(
            f"Upkeep of `ods.{name}` and its tombstones `ods_state.{name}`: compaction of the current state "
            "(Iceberg's rewrite_data_files: the deletion vectors the daily merges left) and expiry of the day "
            "tags older than the retention (SHARP_ODS_TAG_RETENTION_DAYS) and of the snapshots nothing "
            "references any more. The newest state and the tags inside the retention are never touched."
        ),
        deps=[AssetKey(["ods", name])],
        required_resource_keys={"spark"},
        kinds={"iceberg", "spark"},
        metadata={"dagster/table_name": f"ods.{name}"},
    )
    def _upkeep(context) -> MaterializeResult:
        retention, options = ods_tag_retention_days(), ods_compact_options()
        jl = job_log_or_fail()  # first: the catalog lives in the job log's database too
        job_name, window = upkeep_job_name(name), UpkeepDay(datetime.now(UTC).date())
        results = []
        # The one lifecycle of a run whose window is not a partition: claim, heartbeats while a compaction runs
        # (a silent holder is taken over as stale), FAILURE recorded scrubbed and alerted once.
        with claimed_range(context, job_name, window, None, partition_key=window.range_start) as handle:
            store = context.resources.spark.store()
            for ref in ods_upkeep_refs(store, name):
                with jl.step(handle, ref.database, source_type="iceberg", target_type="iceberg") as rec:
                    result = upkeep_table(store, ref, retention, options)
                    rec.source_count = result.storage_before["files"]
                    rec.target_count = result.storage_after["files"]
                    rec.info(json.dumps(result.to_dict()))
                results.append(result)
        return MaterializeResult(
            metadata={
                "retention_days": retention,
                "tables": MetadataValue.json([r.to_dict() for r in results]),
                "dropped_tags": sum(len(r.dropped_tags) for r in results),
                "bytes_after": sum(r.storage_after["bytes"] for r in results),
            }
        )

    return _upkeep
