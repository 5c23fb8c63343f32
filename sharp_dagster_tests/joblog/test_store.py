"""JobLog: atomic claims across processes, stale takeover, heartbeats, steps, finish, takeover, success spans."""

from __future__ import annotations

import time
from datetime import datetime

import pytest
from sqlalchemy import func, select

from sharp_dagster.joblog.errors import (
    ClaimLost,
    ClaimRefused,
    JobLogError,
    JobNotFound,
    NotRunning,
    StillAlive,
)
from sharp_dagster.joblog.models import FAILURE, RUNNING, SUCCESS, job_claim, step_log
from sharp_dagster.joblog.models import job_log as job_log_table
from sharp_dagster.joblog.store import JobLog
from sharp_dagster.periods import PeriodSpec
from sharp_dagster_tests.joblog import workers

DAILY = PeriodSpec("daily", datetime(2024, 1, 1))
ASSET = "dwd/orders"


def _rows(job_log: JobLog, table, *where):
    with job_log.engine.connect() as conn:
        return list(conn.execute(select(table).where(*where)))


def test_ten_concurrent_claims_one_winner(db_url):
    JobLog(db_url)  # schema first, so the children race on the claim only
    outcomes = workers.race_claims(db_url, ASSET, "2024-01-05")
    won = [o for o in outcomes if o[0] == "won"]
    refused = [o for o in outcomes if o[0] == "refused"]
    assert len(won) == 1 and len(refused) == 9, outcomes
    winner_run, winner_job = won[0][1], won[0][2]
    for _, _, message in refused:
        assert f"run {winner_run}" in message and winner_job in message and "since" in message

    job_log = JobLog(db_url)
    schedule_id = f"{ASSET}-20240105000000"
    rows = _rows(job_log, job_log_table, job_log_table.c.job_schedule_id == schedule_id)
    assert [(r.status, r.run_id, r.attempt) for r in rows] == [(RUNNING, winner_run, 1)]
    claims = _rows(job_log, job_claim)
    assert [(c.job_schedule_id, c.job_id) for c in claims] == [(schedule_id, winner_job)]


def test_claim_refused_names_holder_then_stale_takeover(job_log, clock):
    period = DAILY.period_for_key("2024-01-02")
    first = job_log.claim(ASSET, period, "run-A", stale_after_s=120)
    assert (first.attempt, first.partition_key, first.range_start) == (1, "2024-01-02", "20240102000000")

    clock.advance(60)
    with pytest.raises(ClaimRefused) as refused:
        job_log.claim(ASSET, period, "run-B", stale_after_s=120)
    message = str(refused.value)
    assert "run run-A" in message and first.job_id in message and "since 2024-06-01 12:00:00" in message
    assert refused.value.holder_run_id == "run-A"

    clock.advance(61)  # 121 s without a heartbeat
    second = job_log.claim(ASSET, period, "run-B", stale_after_s=120)
    assert second.took_over_job_id == first.job_id and second.attempt == 2

    old = job_log.get(first.job_id)
    assert old.status == FAILURE
    assert old.error.startswith("heartbeat lost since 2024-06-01 12:00:00 UTC, taken over by run run-B")
    assert job_log.get(second.job_id).status == RUNNING

    # The old holder learns at its next heartbeat or finish, and records nothing.
    with pytest.raises(ClaimLost, match="run run-A lost its claim"):
        job_log.heartbeat(first)
    with pytest.raises(ClaimLost):
        job_log.finish(first, SUCCESS)
    assert job_log.get(first.job_id).status == FAILURE
    with pytest.raises(ClaimLost):
        with job_log.step(first, "read"):
            pass

    job_log.finish(second, SUCCESS)
    assert job_log.get(second.job_id).status == SUCCESS
    assert _rows(job_log, job_claim) == []


def test_heartbeat_keeps_the_claim(job_log, clock):
    period = DAILY.period_for_key("2024-01-03")
    handle = job_log.claim(ASSET, period, "run-A", stale_after_s=120)
    for _ in range(3):
        clock.advance(100)
        job_log.heartbeat(handle)
    with pytest.raises(ClaimRefused, match="last heartbeat 2024-06-01 12:05:00 UTC"):
        job_log.claim(ASSET, period, "run-B", stale_after_s=120)
    assert job_log.get(handle.job_id).heartbeat_time == clock.now


def test_claim_timeout_from_environment(job_log, clock, monkeypatch):
    period = DAILY.period_for_key("2024-01-04")
    job_log.claim(ASSET, period, "run-A")
    monkeypatch.setenv("SHARP_CLAIM_TIMEOUT_S", "5")
    clock.advance(4)
    with pytest.raises(ClaimRefused, match="stale after 5s"):
        job_log.claim(ASSET, period, "run-B")
    clock.advance(2)
    assert job_log.claim(ASSET, period, "run-B").attempt == 2
    monkeypatch.setenv("SHARP_CLAIM_TIMEOUT_S", "soon")
    with pytest.raises(ValueError, match="SHARP_CLAIM_TIMEOUT_S"):
        job_log.claim(ASSET, DAILY.period_for_key("2024-01-05"), "run-C")


def test_heartbeat_thread(db_url):
    job_log = JobLog(db_url)  # real clock
    period = DAILY.period_for_key("2024-01-06")
    handle = job_log.claim(ASSET, period, "run-A")
    with job_log.heartbeating(handle, interval_s=0.05) as beat:
        time.sleep(1.2)  # longer than the timeout: only the heartbeats keep the claim
        with pytest.raises(ClaimRefused):
            job_log.claim(ASSET, period, "run-B", stale_after_s=1.0)
    assert beat.beats >= 5
    time.sleep(1.2)  # silent now: run-B takes over
    taker = job_log.claim(ASSET, period, "run-B", stale_after_s=1.0)
    assert taker.took_over_job_id == handle.job_id
    with job_log.heartbeating(handle, interval_s=0.05):
        deadline = time.monotonic() + 5
        while handle.lost is None and time.monotonic() < deadline:
            time.sleep(0.02)
    assert handle.lost is not None and "lost its claim" in handle.lost and "run-B" in handle.lost


def test_steps_record_counts_duration_and_errors(job_log, clock):
    handle = job_log.claim(ASSET, DAILY.period_for_key("2024-01-02"), "run-A")
    with job_log.step(handle, "read", source_type="jdbc", target_type="temp") as step:
        step.source_count = 120
        step.info("read 120 rows")
        clock.advance(2.5)
    with pytest.raises(RuntimeError, match="disk full"):
        with job_log.step(handle, "write", source_type="temp", target_type="parquet") as step:
            step.target_count = 7
            clock.advance(1)
            raise RuntimeError("disk full writing jdbc:postgresql://etl:hunter2@db/x")
    with pytest.raises(JobLogError, match="already recorded"):
        with job_log.step(handle, "read"):
            pass

    steps = {s.step_id: s for s in job_log.steps(handle.job_id)}
    read, write = steps["read"], steps["write"]
    assert (read.status, read.source_count, read.duration_ms, read.source_type) == (
        SUCCESS,
        120,
        2500,
        "jdbc",
    )
    assert read.output == "read 120 rows" and read.end_time is not None
    assert (write.status, write.target_count, write.duration_ms) == (FAILURE, 7, 1000)
    assert (
        "RuntimeError: disk full" in write.error
        and "hunter2" not in write.error
        and "etl:***@db" in write.error
    )

    job_log.finish(handle, FAILURE, error="step write failed: password=hunter2")
    run = job_log.get(handle.job_id)
    assert (run.status, run.source_count, run.target_count) == (FAILURE, 120, 7)
    assert "hunter2" not in run.error
    assert run.duration_s() == pytest.approx(3.5)


def test_step_status_and_finish_release_claim_together(job_log, clock):
    period = DAILY.period_for_key("2024-01-02")
    handle = job_log.claim(ASSET, period, "run-A", project_name="shop")
    job_log.set_application_id(handle, "local-1700000000000")
    with job_log.step(handle, "checkdone") as step:
        step.status = "SKIPPED"
    job_log.finish(handle, SUCCESS)
    assert _rows(job_log, job_claim) == []
    run = job_log.get(handle.job_id)
    assert (run.status, run.application_id, run.project_name, run.steps[0].status) == (
        SUCCESS,
        "local-1700000000000",
        "shop",
        "SKIPPED",
    )
    with pytest.raises(ValueError, match="finish status"):
        job_log.finish(handle, RUNNING)
    # A re-run of the same period is the next attempt of the same schedule id.
    again = job_log.claim(ASSET, period, "run-B")
    assert again.attempt == 2 and again.job_schedule_id == handle.job_schedule_id
    with job_log.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(step_log)).scalar() == 1


def test_takeover_command(job_log, clock):
    handle = job_log.claim(ASSET, DAILY.period_for_key("2024-01-07"), "run-A", stale_after_s=120)
    with pytest.raises(StillAlive, match="force"):
        job_log.takeover(handle.job_id, "operator")
    clock.advance(300)
    run = job_log.takeover(handle.job_id, "worker host died; token=abc123")
    assert run.status == FAILURE and run.error == "worker host died; token=***"
    assert _rows(job_log, job_claim) == []
    with pytest.raises(NotRunning, match="is FAILURE, not RUNNING"):
        job_log.takeover(handle.job_id, "again")
    with pytest.raises(JobNotFound):
        job_log.takeover("no-such-job", "x")
    forced = job_log.claim(ASSET, DAILY.period_for_key("2024-01-08"), "run-B")
    assert job_log.takeover(forced.job_id, "manual", force=True).status == FAILURE
    with pytest.raises(ClaimLost):
        job_log.finish(handle, SUCCESS)


def _run(job_log: JobLog, key: str, status: str, run_id: str = "r") -> None:
    handle = job_log.claim(ASSET, DAILY.period_for_key(key), run_id)
    job_log.finish(handle, status)


def test_success_spans_follow_the_latest_attempt(job_log):
    for day in ("2024-01-01", "2024-01-02", "2024-01-03", "2024-01-05"):
        _run(job_log, day, SUCCESS)
    assert job_log.spans(ASSET) == [
        ("20240101000000", "20240104000000"),
        ("20240105000000", "20240106000000"),
    ]
    # A refresh of 01-02 removes it while it runs, and a failed refresh keeps it out.
    handle = job_log.claim(ASSET, DAILY.period_for_key("2024-01-02"), "refresh")
    assert job_log.spans(ASSET) == [
        ("20240101000000", "20240102000000"),
        ("20240103000000", "20240104000000"),
        ("20240105000000", "20240106000000"),
    ]
    job_log.finish(handle, FAILURE, "bad")
    _run(job_log, "2024-01-04", SUCCESS)
    assert job_log.spans(ASSET) == [
        ("20240101000000", "20240102000000"),
        ("20240103000000", "20240106000000"),
    ]
    incremental = job_log.spans(ASSET)
    assert job_log.rebuild_spans(ASSET) == 2
    assert job_log.spans(ASSET) == incremental
    _run(job_log, "2024-01-02", SUCCESS)
    assert job_log.spans(ASSET) == [("20240101000000", "20240106000000")]


def test_claim_validates_its_input(job_log):
    period = DAILY.period_for_key("2024-01-02")
    with pytest.raises(ValueError, match="job_name"):
        job_log.claim("", period, "r")
    with pytest.raises(ValueError, match="incremental_type"):
        job_log.claim(ASSET, period, "r", incremental_type="cdc")
    handle = job_log.claim(ASSET, period, "r")
    with pytest.raises(ValueError, match="time-window run's end"):
        job_log.set_range_end(handle, "20240109000000")


def test_run_context_manager(job_log):
    period = DAILY.period_for_key("2024-01-09")
    with job_log.run(ASSET, period, "run-ok", heartbeat_interval_s=60) as handle:
        with job_log.step(handle, "write") as step:
            step.target_count = 3
    assert job_log.get(handle.job_id).status == SUCCESS and _rows(job_log, job_claim) == []

    with pytest.raises(ZeroDivisionError):
        with job_log.run(
            ASSET, DAILY.period_for_key("2024-01-10"), "run-bad", heartbeat_interval_s=60
        ) as bad:
            1 / 0  # noqa: B018
    failed = job_log.get(bad.job_id)
    assert failed.status == FAILURE and "ZeroDivisionError" in failed.error

    holder = job_log.claim(ASSET, DAILY.period_for_key("2024-01-11"), "run-holder")
    with pytest.raises(ClaimRefused, match="run-holder"):
        with job_log.run(ASSET, DAILY.period_for_key("2024-01-11"), "run-late"):
            pytest.fail("the block must not run without the claim")
    assert job_log.get(holder.job_id).status == RUNNING


def test_failure_of_a_taken_over_run_is_only_logged(job_log, clock, caplog):
    period = DAILY.period_for_key("2024-01-12")
    old = job_log.claim(ASSET, period, "run-old", stale_after_s=10)
    clock.advance(11)
    job_log.claim(ASSET, period, "run-new", stale_after_s=10)
    job_log.finish(old, FAILURE, "it broke")  # no exception: the row already says FAILURE
    assert "heartbeat lost" in job_log.get(old.job_id).error
    assert "lost its claim" in caplog.text


def test_spans_stay_exact_when_neighbours_finish_concurrently(db_url):
    """Four processes finish interleaved neighbouring hours: every merge races another; one span must remain."""
    job_log = JobLog(db_url)
    hourly = PeriodSpec("hourly", datetime(2024, 1, 1))
    keys = [f"2024-01-{1 + h // 24:02d}-{h % 24:02d}:00" for h in range(48)]
    ctx = workers.context()
    barrier = ctx.Barrier(4)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=workers.run_periods, args=(db_url, "ods/clicks", keys[i::4], barrier, results))
        for i in range(4)
    ]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=180) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert [o[0] for o in outcomes] == ["ok"] * 4, [o[2] for o in outcomes if o[0] != "ok"]
    assert job_log.spans("ods/clicks") == [("20240101000000", "20240103000000")]
    from sharp_dagster.joblog.planner import pending_queue

    assert pending_queue(job_log, "ods/clicks", hourly, datetime(2024, 1, 3)) == []
