"""Sensors of the CDC path.

- `kafka_<db>_sensor`: its cursor holds the topic's end offsets; when they move, it requests one landing run of the
  current hour's partition. It never commits offsets: the landing run reads from the job log's last success and
  records what it actually read, so a failed run loses nothing (the next one starts at the same offsets).
- `binlog_done_<db>_sensor` (checkdone): requests the daily merge of the ODS tables for the earliest day whose 24
  hourly done markers all exist and whose merge is not SUCCESS in the job log yet.
"""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta

from dagster import (
    AssetKey,
    AssetSelection,
    DefaultSensorStatus,
    RunRequest,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

from sharp_dagster.cdc.project import START


def build_kafka_sensor(database: str, topic: str, minimum_interval_seconds: int = 30):
    @sensor(
        name=f"kafka_{database}_sensor",
        target=AssetSelection.assets(AssetKey(["original_binlog", database])),
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=DefaultSensorStatus.STOPPED,
        description=f"Requests a landing of topic {topic} when its end offsets move (cursor: the end offsets).",
    )
    def kafka_sensor(context: SensorEvaluationContext):
        from sharp_dagster.assets.cdc_assets import kafka_config
        from sharp_dagster.cdc.landing_kafka import capture_end_offsets

        ends = capture_end_offsets(kafka_config(), topic)
        cursor = json.dumps({str(p): o for p, o in sorted(ends.items())}, sort_keys=True)
        if cursor == context.cursor:
            return SkipReason(f"{topic}: end offsets unchanged {cursor}")
        hour = datetime.now(UTC).strftime("%Y-%m-%d-%H:00")
        return SensorResult(
            run_requests=[RunRequest(run_key=f"land:{topic}:{cursor}", partition_key=hour)], cursor=cursor
        )

    return kafka_sensor


def build_done_marker_sensor(database: str, ods_asset_keys: list[str], minimum_interval_seconds: int = 60):
    @sensor(
        name=f"binlog_done_{database}_sensor",
        target=AssetSelection.assets(*[AssetKey(k.split("/")) for k in ods_asset_keys]),
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=DefaultSensorStatus.STOPPED,
        description="checkdone: merges a day into the ODS tables once all 24 hourly done markers of it exist.",
    )
    def done_marker_sensor(context: SensorEvaluationContext):
        from sharp_dagster.cdc.done_markers import day_complete
        from sharp_dagster.logdriven import job_log
        from sharp_dagster.settings import Settings

        jl = job_log()
        warehouse = Settings.from_env().warehouse_dir
        day = date.fromisoformat(START)
        today = datetime.now(UTC).date()
        while day < today:
            key = day.isoformat()
            merged = all(_succeeded(jl, name, key) for name in ods_asset_keys)
            if not merged:
                if not day_complete(warehouse, database, key):
                    return SkipReason(f"{key}: done markers incomplete; the merge waits")
                return RunRequest(
                    run_key=f"merge:{database}:{key}:{_attempts(jl, ods_asset_keys, key)}", partition_key=key
                )
            day += timedelta(days=1)
        return SkipReason("every complete day is merged")

    return done_marker_sensor


def _succeeded(jl, name: str, key: str) -> bool:
    start = f"{key.replace('-', '')}000000"
    attempt = jl.latest_attempts(name, starts=[start]).get(start)
    return attempt is not None and attempt.status == "SUCCESS"


def _attempts(jl, names: list[str], key: str) -> int:
    start = f"{key.replace('-', '')}000000"
    return max(
        (a.attempt for n in names for a in [jl.latest_attempts(n, starts=[start]).get(start)] if a), default=0
    )
