"""Planner: pending queue, ordered check, refresh ranges and cross-frequency checks against a real job log."""

from __future__ import annotations

import random
from datetime import datetime, timedelta

import pytest
from sqlalchemy import delete

from sharp_dagster.joblog.models import DONE_STATUSES, FAILURE, RUNNING, SKIPPED, SUCCESS, job_success_span
from sharp_dagster.joblog.models import job_log as job_log_table
from sharp_dagster.joblog.planner import (
    OutOfOrder,
    check_ordered,
    check_upstream_done,
    pending_queue,
    refresh_periods,
)
from sharp_dagster.joblog.store import JobLog
from sharp_dagster.periods import PeriodSpec

DAILY = PeriodSpec("daily", datetime(2024, 1, 1))
HOURLY = PeriodSpec("hourly", datetime(2024, 1, 1))
ASSET = "dwd/orders"


def _run(job_log: JobLog, spec: PeriodSpec, key: str, *statuses: str, asset: str = ASSET) -> str:
    """Run a period once per status (attempts in order); RUNNING leaves the last attempt running."""
    run_id = ""
    for i, status in enumerate(statuses):
        run_id = f"run-{key}-{i + 1}"
        handle = job_log.claim(asset, spec.period_for_key(key), run_id)
        if status != RUNNING:
            job_log.finish(handle, status, None if status == SUCCESS else "boom")
    return run_id


def test_period_spec_keys_and_validation():
    assert DAILY.period_for_key("2024-03-05").range_start == "20240305000000"
    hour = HOURLY.period_for_key("2024-01-01-05:00")
    assert (hour.partition_key, hour.range_start, hour.range_end, hour.period_minutes) == (
        "2024-01-01-05:00",
        "20240101050000",
        "20240101060000",
        60,
    )
    assert DAILY.period_minutes == 1440
    with pytest.raises(ValueError, match="not a daily partition key"):
        DAILY.period_for_key("2024/01/05")
    with pytest.raises(ValueError, match="before the asset's start"):
        DAILY.period_for_key("2023-12-31")
    with pytest.raises(ValueError, match="not on a hourly boundary"):
        PeriodSpec("hourly", datetime(2024, 1, 1, 0, 30))
    with pytest.raises(ValueError, match="grain"):
        PeriodSpec("weekly", datetime(2024, 1, 1))


def test_pending_queue(job_log):
    _run(job_log, DAILY, "2024-01-01", SUCCESS)
    failed_run = _run(job_log, DAILY, "2024-01-02", FAILURE)
    _run(job_log, DAILY, "2024-01-03", SUCCESS)
    _run(job_log, DAILY, "2024-01-04", RUNNING)
    # 2024-01-05 never ran
    _run(job_log, DAILY, "2024-01-06", FAILURE, SUCCESS)  # retried successfully: done
    refresh_run = _run(job_log, DAILY, "2024-01-07", SUCCESS, FAILURE)  # a failed refresh: pending again
    _run(job_log, DAILY, "2024-01-08", SKIPPED)
    # 2024-01-09 never ran; 2024-01-10 is not over at `now`.
    now = datetime(2024, 1, 10, 23, 59)
    queue = pending_queue(job_log, ASSET, DAILY, now)
    assert [p.describe() for p in queue] == [
        f"2024-01-02 (FAILURE, run {failed_run})",
        "2024-01-05 (never run)",
        f"2024-01-07 (FAILURE, run {refresh_run})",
        "2024-01-09 (never run)",
    ]
    assert queue == sorted(queue)
    # Exactly at the end of a day, that day is elapsed.
    assert pending_queue(job_log, ASSET, DAILY, datetime(2024, 1, 11))[-1].partition_key == "2024-01-10"
    # Nothing elapsed yet / an asset with an end.
    assert pending_queue(job_log, ASSET, DAILY, datetime(2024, 1, 1, 23)) == []
    ended = PeriodSpec("daily", datetime(2024, 1, 1), end=datetime(2024, 1, 6))
    assert [p.partition_key for p in pending_queue(job_log, ASSET, ended, now)] == [
        "2024-01-02",
        "2024-01-05",
    ]


def test_pending_queue_hourly_and_other_assets(job_log):
    for hour in range(0, 5):
        _run(job_log, HOURLY, f"2024-01-01-{hour:02d}:00", SUCCESS)
    _run(job_log, HOURLY, "2024-01-01-02:00", FAILURE, asset="ods/other")
    now = datetime(2024, 1, 1, 7, 0)
    assert [p.partition_key for p in pending_queue(job_log, ASSET, HOURLY, now)] == [
        "2024-01-01-05:00",
        "2024-01-01-06:00",
    ]
    assert [p.partition_key for p in pending_queue(job_log, "ods/other", HOURLY, now)][:3] == [
        "2024-01-01-00:00",
        "2024-01-01-01:00",
        "2024-01-01-02:00",
    ]


def test_check_ordered(job_log):
    check_ordered(job_log, ASSET, DAILY, "2024-01-01")  # the first partition never waits
    with pytest.raises(
        OutOfOrder, match=r"2024-01-03 cannot run before the earlier partition 2024-01-01 \(never run\)"
    ):
        check_ordered(job_log, ASSET, DAILY, "2024-01-03")
    _run(job_log, DAILY, "2024-01-01", SUCCESS)
    failed = _run(job_log, DAILY, "2024-01-02", FAILURE)
    with pytest.raises(OutOfOrder) as exc:
        check_ordered(job_log, ASSET, DAILY, "2024-01-05")
    assert f"2024-01-02 (FAILURE, run {failed})" in str(exc.value)
    assert exc.value.blocking.partition_key == "2024-01-02"
    check_ordered(job_log, ASSET, DAILY, "2024-01-02")  # the failed one itself may run
    running = _run(job_log, DAILY, "2024-01-02", RUNNING)
    with pytest.raises(OutOfOrder, match=f"2024-01-02 \\(RUNNING, run {running}\\)"):
        check_ordered(job_log, ASSET, DAILY, "2024-01-03")
    with pytest.raises(ValueError, match="before the asset's start"):
        check_ordered(job_log, ASSET, DAILY, "2023-12-30")


def test_check_ordered_accepts_a_runs_own_earlier_claims(job_log):
    """A range run claims its periods oldest first: its own RUNNING claims do not block its next period."""
    own = {}
    for key in ("2024-01-01", "2024-01-02", "2024-01-03"):
        check_ordered(job_log, ASSET, DAILY, key, held=own)
        handle = job_log.claim(ASSET, DAILY.period_for_key(key), "run-batch")
        own[handle.range_start] = "run-batch"
    check_ordered(job_log, ASSET, DAILY, "2024-01-04", held=own)
    with pytest.raises(OutOfOrder, match=r"2024-01-01 \(RUNNING, run run-batch\)"):
        check_ordered(job_log, ASSET, DAILY, "2024-01-04")  # to anyone else they are running
    # Another run's claim blocks even when named: `held` is the caller's own claims, with its run id.
    _run(job_log, DAILY, "2024-01-04", RUNNING)
    with pytest.raises(OutOfOrder, match=r"2024-01-04 \(RUNNING, run run-2024-01-04-1\)"):
        check_ordered(job_log, ASSET, DAILY, "2024-01-05", held={**own, "20240104000000": "run-batch"})
    # A failed period blocks although the caller names its run.
    failed = _run(job_log, DAILY, "2024-01-01", FAILURE, asset="dwd/other")
    with pytest.raises(OutOfOrder, match=r"2024-01-01 \(FAILURE"):
        check_ordered(job_log, "dwd/other", DAILY, "2024-01-02", held={"20240101000000": failed})


def test_refresh_periods():
    now = datetime(2024, 2, 1)
    days = refresh_periods(DAILY, "2024-01-03", "2024-01-05", now)
    assert [p.partition_key for p in days] == ["2024-01-03", "2024-01-04", "2024-01-05"]
    hours = refresh_periods(HOURLY, "2024-01-02", "2024-01-03", now)
    assert len(hours) == 48 and hours[0].partition_key == "2024-01-02-00:00" == min(hours).partition_key
    assert hours[-1].partition_key == "2024-01-03-23:00"
    assert [
        p.partition_key for p in refresh_periods(HOURLY, "2024-01-02-22:00", "2024-01-02-23:00", now)
    ] == [
        "2024-01-02-22:00",
        "2024-01-02-23:00",
    ]
    with pytest.raises(ValueError, match="not a date"):
        refresh_periods(DAILY, "2024-13-01", "2024-01-05", now)
    with pytest.raises(ValueError, match="empty range"):
        refresh_periods(DAILY, "2024-01-05", "2024-01-03", now)
    with pytest.raises(ValueError, match="before the asset's start"):
        refresh_periods(DAILY, "2023-12-01", "2024-01-03", now)
    with pytest.raises(ValueError, match="not fully elapsed"):
        refresh_periods(DAILY, "2024-01-30", "2024-02-01", now)


def test_check_upstream_done(job_log):
    upstream = "ods/clicks"
    day_start, day_end = datetime(2024, 1, 2), datetime(2024, 1, 3)
    for hour in range(24):
        status = FAILURE if hour == 7 else SUCCESS
        _run(job_log, HOURLY, f"2024-01-02-{hour:02d}:00", status, asset=upstream)
    result = check_upstream_done(job_log, upstream, HOURLY, day_start, day_end)
    assert not result.ok and result.expected == 24
    assert [p.partition_key for p in result.missing] == ["2024-01-02-07:00"]
    assert "1 of 24 periods not done: 2024-01-02-07:00 (FAILURE" in result.describe()

    _run(job_log, HOURLY, "2024-01-02-07:00", SUCCESS, asset=upstream)
    assert check_upstream_done(job_log, upstream, HOURLY, day_start, day_end).ok
    # The first day has never run at all.
    first = check_upstream_done(job_log, upstream, HOURLY, datetime(2024, 1, 1), datetime(2024, 1, 2))
    assert len(first.missing) == 24 and first.missing[0].last_status is None
    # Hours before the upstream exists cannot be done.
    late = PeriodSpec("hourly", datetime(2024, 1, 2, 12))
    partial = check_upstream_done(job_log, upstream, late, day_start, day_end)
    assert [p.partition_key for p in partial.missing][:2] == ["2024-01-02-00:00", "2024-01-02-01:00"]
    assert len(partial.missing) == 12 and partial.expected == 24


def _brute_force_pending(job_log: JobLog, spec: PeriodSpec, now: datetime) -> list[str]:
    """The definition, straight from job_log rows: latest attempt per period, no spans involved."""
    with job_log.engine.connect() as conn:
        rows = list(conn.execute(job_log_table.select().where(job_log_table.c.job_name == ASSET)))
    latest: dict[str, tuple[int, str]] = {}
    for r in rows:
        if r.data_range_start not in latest or r.attempt > latest[r.data_range_start][0]:
            latest[r.data_range_start] = (r.attempt, r.status)
    out = []
    start = spec.start
    while start + spec.step <= spec.floor(now):
        status = latest.get(start.strftime("%Y%m%d%H%M%S"), (0, None))[1]
        if status not in DONE_STATUSES and status != RUNNING:
            out.append(start.strftime("%Y-%m-%d-%H:%M"))
        start += spec.step
    return out


def test_pending_queue_matches_the_definition_under_random_histories(job_log):
    rng = random.Random(20240101)
    now = datetime(2024, 1, 3, 0, 0)  # 48 hourly periods
    keys = [(HOURLY.start + timedelta(hours=h)).strftime("%Y-%m-%d-%H:%M") for h in range(50)]
    running = {}
    for _ in range(250):
        key = rng.choice(keys)
        if key in running:
            handle = running.pop(key)
            job_log.finish(handle, rng.choice([SUCCESS, SUCCESS, FAILURE, SKIPPED]))
        else:
            running[key] = job_log.claim(ASSET, HOURLY.period_for_key(key), f"r{_}")
    expected = _brute_force_pending(job_log, HOURLY, now)
    got = [p.partition_key for p in pending_queue(job_log, ASSET, HOURLY, now)]
    assert got == expected and 0 < len(got) < 48
    # The spans are only an accelerator: without them the answer is the same.
    with job_log.engine.begin() as conn:
        conn.execute(delete(job_success_span))
    assert [p.partition_key for p in pending_queue(job_log, ASSET, HOURLY, now)] == expected
    job_log.rebuild_spans(ASSET)
    assert [p.partition_key for p in pending_queue(job_log, ASSET, HOURLY, now)] == expected


def test_long_never_run_stretches(job_log):
    """A gap of thousands of periods is read as one range scan; the answer is the same."""
    now = datetime(2024, 5, 1)  # 2904 hours after the start
    failed = _run(job_log, HOURLY, "2024-01-05-04:00", FAILURE)  # hour 100
    _run(job_log, HOURLY, "2024-04-14-04:00", SUCCESS)  # hour 2500
    queue = pending_queue(job_log, ASSET, HOURLY, now)
    assert len(queue) == 2903
    assert queue[100].describe() == f"2024-01-05-04:00 (FAILURE, run {failed})"
    assert "2024-04-14-04:00" not in {p.partition_key for p in queue}
    assert sum(p.last_status is not None for p in queue) == 1


def test_periods_in_window_are_the_upstream_periods_without_a_parse():
    from sharp_dagster.periods import day_before, keys_in_window, period_at, periods_in_window

    day = period_at(datetime(2024, 3, 1), "daily")
    hours = periods_in_window(day, "hourly")
    assert len(hours) == 24 and (hours[0].start, hours[-1].end) == (day.start, day.end)
    assert {p.grain for p in hours} == {"hourly"}
    week = periods_in_window(day, "daily", lookback=6)
    assert [p.partition_key for p in week] == keys_in_window(day, "daily", 6)
    assert week[0].partition_key == "2024-02-24" and week[-1] == day
    assert day_before("2024-03-01") == "2024-02-29" and day_before("2024-01-01") == "2023-12-31"
    with pytest.raises(ValueError):
        day_before("2024-02-30")
