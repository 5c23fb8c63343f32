"""Sensors of the CDC path.

- `kafka_<db>_sensor`: its cursor holds the topic's end offsets (read from the cluster of the `kafka` resource); when
  they move, it requests one landing run of the current hour's partition. It never commits offsets: the landing run reads from the job log's last success and
  records what it actually read, so a failed run loses nothing (the next one starts at the same offsets).

The daily ODS merges are launched by the log-driven sensor (`sensors/log_driven.py`), like every period asset:
an ODS day is ready once its 24 hourly done markers all exist (checkdone, the asset's `ready` in
`warehouse/layout.py`), so one sensor plans them, in order, with its retry limit and alert.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

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

from sharp_dagster.periods import period_at
from sharp_dagster.resources.kafka import KafkaResource


def build_kafka_sensor(database: str, topic: str, minimum_interval_seconds: int = 30):
    @sensor(
        name=f"kafka_{database}_sensor",
        target=AssetSelection.assets(AssetKey(["original_binlog", database])),
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=DefaultSensorStatus.STOPPED,
        description=f"Requests a landing of topic {topic} when its end offsets move (cursor: the end offsets).",
    )
    def kafka_sensor(context: SensorEvaluationContext, kafka: KafkaResource):
        # Not at the top: the Kafka client loads only when the sensor ticks, not when the code location starts.
        from sharp_dagster.cdc.landing.kafka_source import capture_end_offsets

        ends = capture_end_offsets(kafka.consumer_config(), topic)
        cursor = json.dumps({str(p): o for p, o in sorted(ends.items())}, sort_keys=True)
        if cursor == context.cursor:
            return SkipReason(f"{topic}: end offsets unchanged {cursor}")
        hour = period_at(datetime.now(UTC), "hourly").partition_key
        return SensorResult(
            run_requests=[RunRequest(run_key=f"land:{topic}:{cursor}", partition_key=hour)], cursor=cursor
        )

    return kafka_sensor
