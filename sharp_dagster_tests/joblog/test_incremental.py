"""Incremental modes: time window, auto-increment key and Kafka offsets, through a real job log."""

from __future__ import annotations

from datetime import datetime

import pytest

from sharp_dagster.joblog.incremental import (
    EARLIEST,
    KafkaRange,
    format_id,
    format_offsets,
    parse_id,
    parse_offsets,
    plan_auto_inc,
    plan_kafka,
    plan_time_window,
)
from sharp_dagster.joblog.models import AUTO_INC_ID, FAILURE, KAFKA_OFFSET, SUCCESS
from sharp_dagster.periods import PeriodSpec

ASSET = "ods/orders"


def test_time_window_once_and_latest_only(job_log):
    spec = PeriodSpec("daily", datetime(2024, 1, 1))
    now = datetime(2024, 1, 5, 8)
    assert [p.partition_key for p in plan_time_window(job_log, ASSET, spec, now)] == [
        "2024-01-01",
        "2024-01-02",
        "2024-01-03",
        "2024-01-04",
    ]
    assert [p.partition_key for p in plan_time_window(job_log, ASSET, spec, now, once=True)] == ["2024-01-01"]
    assert [p.partition_key for p in plan_time_window(job_log, ASSET, spec, now, latest_only=True)] == [
        "2024-01-04"
    ]
    with pytest.raises(ValueError):
        plan_time_window(job_log, ASSET, spec, now, once=True, latest_only=True)


def test_auto_increment_ranges(job_log):
    first = plan_auto_inc(job_log, ASSET, period_minutes=60)
    assert (first.start, first.range_start, first.range_end) == (0, "0" * 20, None)
    assert first.where("order_id") == "order_id > 0"
    with pytest.raises(ValueError, match="column"):
        first.where("id; drop table x")

    handle = job_log.claim(ASSET, first, "run-1")
    assert handle.incremental_type == AUTO_INC_ID and handle.job_schedule_id == f"{ASSET}-{'0' * 20}"
    job_log.set_range_end(handle, first.record_read(150))
    job_log.finish(handle, SUCCESS)
    assert job_log.get(handle.job_id).range_end == "00000000000000000150"

    second = plan_auto_inc(job_log, ASSET)
    assert second.start == 150 and second.where("id") == "id > 150"
    handle = job_log.claim(ASSET, second, "run-2")
    job_log.set_range_end(handle, second.record_read(9_000))
    job_log.finish(handle, FAILURE, "write failed")
    # A failure does not move the start; a run that reads nothing keeps it too.
    third = plan_auto_inc(job_log, ASSET)
    assert third.start == 150
    handle = job_log.claim(ASSET, third, "run-3")
    assert handle.attempt == 2  # same start: the same schedule, retried
    job_log.set_range_end(handle, third.record_read(None))
    job_log.finish(handle, SUCCESS)
    assert plan_auto_inc(job_log, ASSET).start == 150
    assert plan_auto_inc(job_log, ASSET, default_start=1_000).start == 1_000
    with pytest.raises(ValueError, match="not above the range start"):
        third.record_read(10)
    # Padding keeps text order = numeric order, which is what "last success" relies on.
    assert format_id(9) < format_id(10) < format_id(10**19)
    assert parse_id(format_id(12345)) == 12345
    with pytest.raises(ValueError):
        format_id(-1)


def test_kafka_offset_ranges(job_log):
    first = plan_kafka(job_log, ASSET)
    assert first.start is None and first.range_start == EARLIEST and first.start_offset("orders", 0) is None
    handle = job_log.claim(ASSET, first, "run-1")
    assert handle.incremental_type == KAFKA_OFFSET
    for partition, offset in [(0, 0), (0, 1), (0, 41), (1, 7), (1, 3)]:
        first.record("orders", partition, offset)
    job_log.set_range_end(handle, first.finish_end())
    job_log.finish(handle, SUCCESS)
    assert job_log.get(handle.job_id).range_end == '{"orders":{"0":42,"1":8}}'

    second = plan_kafka(job_log, ASSET, default_start={"orders": {2: 5}})
    assert second.start == {"orders": {0: 42, 1: 8, 2: 5}}
    assert second.start_offset("orders", 1) == 8 and second.start_offset("payments", 0) is None
    handle = job_log.claim(ASSET, second, "run-2")
    second.record_batch({"orders": {1: 19}})
    assert second.end_offsets() == {"orders": {0: 42, 1: 20, 2: 5}}
    job_log.set_range_end(handle, second.finish_end())
    job_log.finish(handle, SUCCESS)
    assert plan_kafka(job_log, ASSET).start == {"orders": {0: 42, 1: 20, 2: 5}}

    # A failed run leaves the start where the last success ended.
    third = plan_kafka(job_log, ASSET)
    handle = job_log.claim(ASSET, third, "run-3")
    third.record("orders", 0, 99)
    job_log.set_range_end(handle, third.finish_end())
    job_log.finish(handle, FAILURE, "sink down")
    assert plan_kafka(job_log, ASSET).start == {"orders": {0: 42, 1: 20, 2: 5}}


def test_kafka_offsets_text_format_and_long_starts(job_log):
    offsets = {"b": {10: 1, 2: 3}, "a": {"0": 4}}
    assert format_offsets(offsets) == '{"a":{"0":4},"b":{"2":3,"10":1}}'
    assert parse_offsets(format_offsets(offsets)) == {"a": {0: 4}, "b": {2: 3, 10: 1}}
    assert parse_offsets(EARLIEST) is None
    with pytest.raises(ValueError, match="Kafka offsets"):
        parse_offsets("{not json")
    # Sixty partitions: the schedule id hashes the long JSON start but the row keeps it whole.
    wide = KafkaRange(start={"events": {p: 1_000_000 + p for p in range(60)}})
    handle = job_log.claim(ASSET, wide, "run-wide")
    assert handle.job_schedule_id.startswith(f"{ASSET}-sha256:") and len(handle.job_schedule_id) < 80
    assert job_log.get(handle.job_id).range_start == wide.range_start
    too_wide = KafkaRange(start={"events": {p: 10**12 + p for p in range(100)}})
    with pytest.raises(ValueError, match="data_range_start is .* characters"):
        job_log.claim(ASSET, too_wide, "run-too-wide")
