"""Writing a table rollback to the job log (sharp_dagster.joblog.rollback), without Spark: the history rows are the
shape `IcebergTables.history()` returns, the table rollback a recorded callable, the job log a real SQLite file."""

from __future__ import annotations

from datetime import datetime

import pytest

from sharp_dagster.joblog.models import FAILURE, RUNNING, SUCCESS
from sharp_dagster.joblog.planner import check_upstream_done, pending_queue
from sharp_dagster.joblog.records import schedule_id_for
from sharp_dagster.joblog.rollback import RollbackRefused, rollback_table, undone_publishes
from sharp_dagster.joblog.store import JobLog
from sharp_dagster.periods import PeriodSpec
from sharp_dagster_tests.joblog.conftest import FakeClock

ASSET = "ods/orders"
SPEC = PeriodSpec("daily", datetime(2024, 1, 1))
SPECS = {ASSET: SPEC}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(datetime(2024, 2, 1, 12, 0, 0))


@pytest.fixture
def jl(tmp_path, clock) -> JobLog:
    return JobLog(f"sqlite:///{tmp_path / 'joblog.db'}", clock=clock)


def _publish(jl: JobLog, key: str, run_id: str) -> tuple[str, int]:
    """A successful attempt of one period: its job id and attempt number."""
    handle = jl.claim(ASSET, SPEC.period_for_key(key), run_id, partition_key=key)
    jl.finish(handle, SUCCESS)
    return handle.job_id, handle.attempt


def _snap(
    sid: int, parent: int | None, current: bool = False, job_id=None, key=None, token=None, ancestor=True
):
    props = {k: v for k, v in {"job_id": job_id, "partition": key, "token": token}.items() if v is not None}
    return {
        "snapshot_id": sid,
        "parent_id": parent,
        "made_current_at": datetime(2024, 2, 1, 0, sid),
        "operation": "overwrite",
        "is_current_ancestor": ancestor,
        "is_current": current,
        "token": token,
        "properties": props,
        "added_records": 10 * sid,
        "deleted_records": 0,
    }


class Roll:
    """The caller's table rollback, recording its calls."""

    def __init__(self, fail: Exception | None = None):
        self.calls: list[tuple[int, int | None]] = []
        self.fail = fail

    def __call__(self, target: int, expected_head: int | None) -> int | None:
        self.calls.append((target, expected_head))
        if self.fail is not None:
            raise self.fail
        return expected_head


def _history(jl: JobLog) -> tuple[list[dict], dict[str, str]]:
    """Snapshots 1 (day 1) <- 2 (day 2) <- 3 (day 3) <- 4 (day 2 again), head 4; and 9, a side branch off 1."""
    jobs = {}
    for key in ("2024-01-01", "2024-01-02", "2024-01-03"):
        jobs[key], _ = _publish(jl, key, f"run-{key}")
    second, attempt = _publish(jl, "2024-01-02", "run-again")
    history = [
        _snap(1, None, job_id=jobs["2024-01-01"], key="2024-01-01", token="1"),
        _snap(9, 1, ancestor=False),
        _snap(2, 1, job_id=jobs["2024-01-02"], key="2024-01-02", token="1"),
        _snap(3, 2, job_id=jobs["2024-01-03"], key="2024-01-03", token="1"),
        _snap(4, 3, current=True, job_id=second, key="2024-01-02", token=str(attempt)),
    ]
    return history, {**jobs, "second": second}


def test_undone_publishes_walk_mains_parents():
    history = [_snap(1, None), _snap(9, 1, ancestor=False), _snap(2, 1), _snap(3, 2, current=True)]
    assert [u.snapshot_id for u in undone_publishes(history, 1)] == [2, 3]
    assert undone_publishes(history, 3) == []
    with pytest.raises(RollbackRefused, match="not an ancestor"):
        undone_publishes(history, 9)
    with pytest.raises(RollbackRefused, match="not in main's history"):
        undone_publishes(history, 77)


def test_rollback_records_a_failure_attempt_per_undone_period(jl, clock):
    history, jobs = _history(jl)
    roll = Roll()
    result = rollback_table(
        jl,
        table="ods.orders",
        default_job_name=ASSET,
        history=history,
        target=1,
        specs=SPECS,
        rollback=roll,
        reason="bad source file",
    )
    assert roll.calls == [(1, 4)]  # the head it read: the table refuses if main moved since
    assert [u.snapshot_id for u in result.undone] == [2, 3, 4]
    assert {(p.job_name, p.partition_key) for p in result.periods} == {
        (ASSET, "2024-01-02"),
        (ASSET, "2024-01-03"),
    }

    days = ["2024-01-01", "2024-01-02", "2024-01-03"]
    starts = {SPEC.period_for_key(d).range_start: d for d in days}
    by_day = {starts[k]: v for k, v in jl.latest_attempts(ASSET, starts=list(starts)).items()}
    assert by_day["2024-01-01"].status == SUCCESS  # not undone
    assert by_day["2024-01-02"].status == FAILURE and by_day["2024-01-02"].attempt == 3
    assert by_day["2024-01-03"].status == FAILURE and by_day["2024-01-03"].attempt == 2

    day2 = jl.get(by_day["2024-01-02"].job_id)
    assert day2.error.startswith(
        "rolled back: ods.orders restored to snapshot 1 (snapshot 2, published by attempt 1"
    )
    assert f"snapshot 4, published by attempt 2 / job id {jobs['second']}, undone)" in day2.error
    assert day2.error.endswith(": bad source file")
    (step,) = day2.steps
    assert step.step_id == "rollback" and step.status == SUCCESS
    assert "undone: snapshot 4" in step.output and f"job id {jobs['second']}" in step.output
    assert "reason: bad source file" in step.output

    # The planner re-runs both days; a downstream of the day is refused by the upstream gate.
    clock.advance(3600)
    queue = {p.partition_key for p in pending_queue(jl, ASSET, SPEC, datetime(2024, 1, 5))}
    assert {"2024-01-02", "2024-01-03"} <= queue and "2024-01-01" not in queue
    gate = check_upstream_done(jl, ASSET, SPEC, datetime(2024, 1, 2), datetime(2024, 1, 3))
    assert not gate.ok
    assert check_upstream_done(jl, ASSET, SPEC, datetime(2024, 1, 1), datetime(2024, 1, 2)).ok


def test_rollback_refuses_a_live_claim_and_changes_nothing(jl):
    history, _ = _history(jl)
    live = jl.claim(ASSET, SPEC.period_for_key("2024-01-03"), "run-live", partition_key="2024-01-03")
    before = jl.recent(ASSET, 50)
    roll = Roll()
    with pytest.raises(RollbackRefused, match=r"ods/orders \[2024-01-03\] is claimed by run run-live"):
        rollback_table(
            jl,
            table="ods.orders",
            default_job_name=ASSET,
            history=history,
            target=1,
            specs=SPECS,
            rollback=roll,
        )
    assert roll.calls == []
    assert jl.recent(ASSET, 50) == before
    assert jl.get(live.job_id).status == RUNNING
    assert jl.inspect_claim(schedule_id_for(ASSET, live.range_start)).job_id == live.job_id


def test_rollback_refuses_a_target_off_main(jl):
    history, _ = _history(jl)
    before = jl.recent(ASSET, 50)
    roll = Roll()
    with pytest.raises(RollbackRefused, match="snapshot 9 is not an ancestor"):
        rollback_table(
            jl,
            table="ods.orders",
            default_job_name=ASSET,
            history=history,
            target=9,
            specs=SPECS,
            rollback=roll,
        )
    assert roll.calls == [] and jl.recent(ASSET, 50) == before


def test_a_failed_table_rollback_releases_the_claims_as_failure(jl):
    history, _ = _history(jl)
    roll = Roll(fail=RuntimeError("main moved"))
    with pytest.raises(RuntimeError, match="main moved"):
        rollback_table(
            jl,
            table="ods.orders",
            default_job_name=ASSET,
            history=history,
            target=3,
            specs=SPECS,
            rollback=roll,
        )
    (latest,) = jl.recent(ASSET, 1)
    assert (
        latest.status == FAILURE and "rollback of ods.orders to snapshot 3 failed: main moved" in latest.error
    )
    assert jl.inspect_claim(schedule_id_for(ASSET, latest.range_start)) is None


def test_publishes_outside_the_job_log_are_reported_not_recorded(jl):
    history = [_snap(1, None), _snap(2, 1, current=True)]  # written without sharp.job_id
    result = rollback_table(
        jl,
        table="ods.orders",
        default_job_name=ASSET,
        history=history,
        target=1,
        specs=SPECS,
        rollback=Roll(),
    )
    assert result.periods == [] and [u.snapshot_id for u, _ in result.unrecorded] == [2]
    assert jl.recent(ASSET, 10) == []
