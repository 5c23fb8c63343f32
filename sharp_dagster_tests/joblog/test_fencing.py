"""Takeover compares the heartbeat it judged stale; fencing tokens; the heartbeat interval follows the timeout.

Every test runs on SQLite and on a private PostgreSQL server (the `db_url` fixture). "A heartbeat arrives during a
takeover" is interleaved exactly through `JobLog.takeover_hook`, which runs between the takeover's read of the
claim and its compare-and-set: no sleeps, no luck.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta

import pytest
from sqlalchemy import select

from sharp_dagster.joblog.errors import ClaimLost, ClaimRefused, StaleToken, StillAlive
from sharp_dagster.joblog.heartbeat import heartbeat_interval_s
from sharp_dagster.joblog.models import FAILURE, RUNNING, SUCCESS, job_claim
from sharp_dagster.joblog.models import job_log as job_log_table
from sharp_dagster.joblog.store import JobLog
from sharp_dagster.periods import PeriodSpec
from sharp_dagster_tests.joblog import workers

DAILY = PeriodSpec("daily", datetime(2024, 1, 1))
ASSET = "dwd/fenced"


def _claims(job_log: JobLog) -> list[tuple[str, str]]:
    with job_log.engine.connect() as conn:
        return [(r.job_schedule_id, r.job_id) for r in conn.execute(select(job_claim))]


def _attempts(job_log: JobLog, schedule_id: str) -> list[tuple[int, str]]:
    c = job_log_table.c
    with job_log.engine.connect() as conn:
        rows = conn.execute(
            select(c.attempt, c.status).where(c.job_schedule_id == schedule_id).order_by(c.attempt)
        )
        return [(r.attempt, r.status) for r in rows]


def test_heartbeat_during_a_claim_takeover_keeps_the_live_holder(job_log, clock):
    period = DAILY.period_for_key("2024-02-01")
    holder = job_log.claim(ASSET, period, "run-A", stale_after_s=120)
    clock.advance(121)  # silent past the timeout: B will judge A stale ...

    seen = []

    def heartbeat_in_between(row):
        # ... and A's heartbeat lands after B read the claim row, before B's compare-and-set.
        seen.append(row.heartbeat_time)
        clock.advance(1)
        job_log.heartbeat(holder)

    job_log.takeover_hook = heartbeat_in_between
    with pytest.raises(ClaimRefused, match="held by run run-A") as refused:
        job_log.claim(ASSET, period, "run-B", stale_after_s=120)
    job_log.takeover_hook = None

    assert seen == [datetime(2024, 6, 1, 12, 0, 0)]  # one takeover attempt, on the stale heartbeat
    assert "last heartbeat 2024-06-01 12:02:02 UTC (0s ago" in str(refused.value)
    row = job_log.get(holder.job_id)
    assert (row.status, row.error, row.job_end_time) == (RUNNING, None, None)
    assert row.heartbeat_time == clock.now
    assert _claims(job_log) == [(holder.job_schedule_id, holder.job_id)]
    assert _attempts(job_log, holder.job_schedule_id) == [(1, RUNNING)]  # B recorded nothing

    # The holder is unaffected: it publishes and finishes.
    job_log.assert_current(holder)
    job_log.finish(holder, SUCCESS)
    assert _attempts(job_log, holder.job_schedule_id) == [(1, SUCCESS)]


def test_without_a_heartbeat_in_between_the_takeover_goes_through(job_log, clock):
    """The control of the test above: the same interleaving minus the heartbeat takes the claim over."""
    period = DAILY.period_for_key("2024-02-02")
    holder = job_log.claim(ASSET, period, "run-A", stale_after_s=120)
    clock.advance(121)
    job_log.takeover_hook = lambda row: clock.advance(1)
    taker = job_log.claim(ASSET, period, "run-B", stale_after_s=120)
    assert taker.took_over_job_id == holder.job_id and taker.token == 2
    assert _attempts(job_log, holder.job_schedule_id) == [(1, FAILURE), (2, RUNNING)]
    with pytest.raises(ClaimLost):
        job_log.heartbeat(holder)


def test_heartbeat_during_an_admin_takeover_changes_nothing(job_log, clock):
    period = DAILY.period_for_key("2024-02-03")
    holder = job_log.claim(ASSET, period, "run-A", stale_after_s=120)
    clock.advance(500)

    def heartbeat_in_between(row):
        clock.advance(1)
        job_log.heartbeat(holder)

    job_log.takeover_hook = heartbeat_in_between
    with pytest.raises(StillAlive, match="sent a heartbeat while it was being taken over"):
        job_log.takeover(holder.job_id, "operator: stuck", stale_after_s=120)
    row = job_log.get(holder.job_id)
    assert (row.status, row.error) == (RUNNING, None)
    assert _claims(job_log) == [(holder.job_schedule_id, holder.job_id)]

    # Forced, the operator's word wins even over a heartbeat in between.
    ended = job_log.takeover(holder.job_id, "operator: really gone", force=True)
    assert (ended.status, ended.error) == (FAILURE, "operator: really gone")
    assert _claims(job_log) == []


def test_fencing_token_is_checked_and_the_publish_recorded(job_log, clock):
    period = DAILY.period_for_key("2024-02-04")
    first = job_log.claim(ASSET, period, "run-A", stale_after_s=120)
    assert first.token == first.attempt == 1
    clock.advance(30)
    published = job_log.assert_current(first, 1)
    assert published == clock.now
    assert job_log.get(first.job_id).publish_time == published
    assert job_log.get(first.job_id).heartbeat_time == published  # the check counts as a heartbeat

    clock.advance(121)  # A stalls past the timeout after its check; B takes over
    second = job_log.claim(ASSET, period, "run-B", stale_after_s=120)
    assert second.token == 2

    # A resumes: its token is no longer current, nothing is recorded for it.
    with pytest.raises(StaleToken, match="publishing with fencing token 1 refused") as stale:
        job_log.assert_current(first)
    assert isinstance(stale.value, ClaimLost) and "now held by run run-B" in str(stale.value)
    assert job_log.get(first.job_id).publish_time == published  # unchanged
    # B's handle with an old token is refused too, and leaves B's row untouched.
    with pytest.raises(StaleToken):
        job_log.assert_current(second, 1)
    assert job_log.get(second.job_id).publish_time is None

    clock.advance(5)
    assert job_log.assert_current(second) == clock.now
    job_log.finish(second, SUCCESS)
    done = job_log.get(second.job_id)
    assert (done.status, done.publish_time) == (SUCCESS, clock.now)
    # Released: nobody holds the period, so no token is current.
    with pytest.raises(StaleToken):
        job_log.assert_current(second)


def test_ten_processes_take_over_a_stale_claim_one_wins(db_url):
    """A stale claim and ten processes claiming the period at the same moment: every one of them tries the
    takeover; exactly one compare-and-set matches, the nine others find a fresh holder and are refused."""
    stale = JobLog(db_url, clock=lambda: datetime(2024, 6, 1, 12, 0, 0))  # heartbeat years in the past
    key = "2024-02-05"
    old = stale.claim(ASSET, DAILY.period_for_key(key), "run-old")

    outcomes = workers.race_claims(db_url, ASSET, key)
    won = [o for o in outcomes if o[0] == "won"]
    assert len(won) == 1 and sum(o[0] == "refused" for o in outcomes) == 9, outcomes

    job_log = JobLog(db_url)
    assert _attempts(job_log, old.job_schedule_id) == [(1, FAILURE), (2, RUNNING)]
    assert _claims(job_log) == [(old.job_schedule_id, won[0][2])]


def test_heartbeat_interval_follows_the_claim_timeout(monkeypatch):
    monkeypatch.delenv("SHARP_HEARTBEAT_INTERVAL_S", raising=False)
    monkeypatch.delenv("SHARP_CLAIM_TIMEOUT_S", raising=False)
    assert heartbeat_interval_s() == 10.0  # default timeout 120 s: capped at 10 s
    assert heartbeat_interval_s(4) == 1.0
    assert heartbeat_interval_s(0.8) == pytest.approx(0.2)
    monkeypatch.setenv("SHARP_CLAIM_TIMEOUT_S", "6")
    assert heartbeat_interval_s() == 1.5
    monkeypatch.setenv("SHARP_HEARTBEAT_INTERVAL_S", "2")
    assert heartbeat_interval_s() == 2.0
    monkeypatch.setenv("SHARP_HEARTBEAT_INTERVAL_S", "6")
    with pytest.raises(ValueError, match="below the claim timeout"):
        heartbeat_interval_s()
    monkeypatch.setenv("SHARP_HEARTBEAT_INTERVAL_S", "often")
    with pytest.raises(ValueError, match="SHARP_HEARTBEAT_INTERVAL_S"):
        heartbeat_interval_s()


def test_a_short_claim_timeout_never_loses_a_healthy_holder(db_url, monkeypatch):
    """Claim timeout 1.2 s (under the old fixed 10 s beat): the default interval keeps the holder's claim."""
    monkeypatch.delenv("SHARP_HEARTBEAT_INTERVAL_S", raising=False)
    monkeypatch.setenv("SHARP_CLAIM_TIMEOUT_S", "1.2")
    job_log = JobLog(db_url)  # real clock
    period = DAILY.period_for_key("2024-02-06")
    handle = job_log.claim(ASSET, period, "run-A")
    deadline = time.monotonic() + 3.0  # 2.5 claim timeouts
    with job_log.heartbeating(handle) as beat:
        while time.monotonic() < deadline:
            with pytest.raises(ClaimRefused):
                job_log.claim(ASSET, period, "run-B")
            time.sleep(0.1)
    assert beat.beats >= 6 and handle.lost is None
    job_log.assert_current(handle)
    job_log.finish(handle, SUCCESS)
    assert job_log.get(handle.job_id).status == SUCCESS
    assert datetime.now() - timedelta(days=1) < job_log.get(handle.job_id).publish_time


def test_a_range_is_fenced_in_one_transaction(job_log, clock):
    periods = [DAILY.period_for_key(k) for k in ("2024-03-01", "2024-03-02", "2024-03-03")]
    handles = [job_log.claim(ASSET, p, "run-R", stale_after_s=120) for p in periods]
    clock.advance(10)
    assert job_log.assert_current_all(handles) == clock.now
    assert [job_log.get(h.job_id).publish_time for h in handles] == [clock.now] * 3

    # The middle claim is taken over: nothing is recorded for any of the three.
    clock.advance(121)
    job_log.heartbeat(handles[0])
    job_log.heartbeat(handles[2])
    taker = job_log.claim(ASSET, periods[1], "run-T", stale_after_s=120)
    before = [job_log.get(h.job_id).publish_time for h in handles]
    clock.advance(5)
    with pytest.raises(StaleToken, match="2024-03-02.*now held by run run-T"):
        job_log.assert_current_all(handles)
    assert [job_log.get(h.job_id).publish_time for h in handles] == before, "all or nothing"
    assert job_log.get(taker.job_id).publish_time is None


def test_a_withdrawn_attempt_leaves_no_trace(job_log, clock):
    from sharp_dagster.joblog.planner import pending_queue

    period = DAILY.period_for_key("2024-01-01")
    done = job_log.claim(ASSET, period, "run-1")
    job_log.finish(done, SUCCESS)
    again = job_log.claim(ASSET, period, "run-2")  # a refresh: the period leaves its success span
    with job_log.step(again, "read"):
        pass
    assert job_log.withdraw(again)
    assert _attempts(job_log, again.job_schedule_id) == [(1, SUCCESS)]
    assert _claims(job_log) == []
    assert job_log.steps(again.job_id) == []
    pending = pending_queue(job_log, ASSET, DAILY, clock.now)
    assert pending[0].partition_key == "2024-01-02", "the success span is back: 2024-01-01 is done"
    assert not job_log.withdraw(again), "only a held claim is withdrawn"
    # A period claimed for the first time is back to never run.
    first = job_log.claim(ASSET, DAILY.period_for_key("2024-01-02"), "run-3")
    assert job_log.withdraw(first)
    assert _attempts(job_log, first.job_schedule_id) == []
