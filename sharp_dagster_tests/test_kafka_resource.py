"""The Kafka cluster as a resource (`resources/kafka.py`): its client settings, from its own field or
`SHARP_KAFKA_BOOTSTRAP`, and the Kafka sensor that takes it from the resources (one tick evaluated, the cursor
asserted; the broker's end offsets stand in by a fake, no broker runs)."""

from __future__ import annotations

import pytest
from dagster import Failure, SkipReason, build_sensor_context

from sharp_dagster.cdc.landing import kafka_source
from sharp_dagster.resources.kafka import KafkaResource
from sharp_dagster.sensors.cdc import build_kafka_sensor
from sharp_dagster.settings import KAFKA_ENV


def test_the_field_wins_over_the_environment(monkeypatch):
    monkeypatch.setenv(KAFKA_ENV, "127.0.0.1:9092")
    assert KafkaResource().consumer_config() == {"bootstrap.servers": "127.0.0.1:9092"}
    assert KafkaResource(bootstrap_servers="127.0.0.1:9093").consumer_config() == {
        "bootstrap.servers": "127.0.0.1:9093"
    }


def test_no_servers_is_a_failure_naming_the_variable(monkeypatch):
    monkeypatch.delenv(KAFKA_ENV, raising=False)
    with pytest.raises(Failure, match=f"{KAFKA_ENV} is not set"):
        KafkaResource().consumer_config()


def test_the_sensor_reads_the_end_offsets_through_the_resource(monkeypatch):
    asked = []

    def ends(config, topic):
        asked.append((config, topic))
        return {1: 7, 0: 5}

    monkeypatch.setattr(kafka_source, "capture_end_offsets", ends)
    sensor = build_kafka_sensor("shop", "shop.binlog")
    kafka = KafkaResource(bootstrap_servers="127.0.0.1:9094")
    result = sensor(build_sensor_context(resources={"kafka": kafka}))
    assert asked == [({"bootstrap.servers": "127.0.0.1:9094"}, "shop.binlog")]
    assert result.cursor == '{"0": 5, "1": 7}'
    [request] = result.run_requests
    assert request.run_key == 'land:shop.binlog:{"0": 5, "1": 7}'
    again = sensor(build_sensor_context(cursor=result.cursor, resources={"kafka": kafka}))
    assert isinstance(again, SkipReason)
