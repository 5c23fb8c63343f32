"""Faults 5 and 9: takeovers.

5. A run that staged and audited its partition is frozen (SIGSTOP at `after_audit`) past the claim timeout; another
   run takes the period over and publishes; the first is resumed (SIGCONT): its fence refuses it, it publishes
   nothing, and the table's current snapshot and the job log both name the second run.
9. A takeover judges the holder stale; exactly between that read and its compare-and-set the holder (frozen at
   `after_claim`, then resumed from `JobLog.takeover_hook`) sends a heartbeat. The takeover must not happen: the
   second run is refused naming the live holder, which goes on and publishes; no attempt ends FAILURE.
"""

from __future__ import annotations

import time

from sharp_dagster.joblog import FAILURE, SUCCESS
from sharp_dagster_tests.faults.harness import (
    D2,
    ChildRun,
    assert_equals_reference,
    attempts,
    claim_row,
    current_publish,
    failure_text,
    materialize_here,
    prepare,
    published,
    record,
    stage_branches,
    wait_stale,
)


def test_stopped_run_resumed_after_takeover_does_not_publish(world):
    name, day = "ods/product", D2
    prepare(world, name, day)
    base = len(attempts(world, name, day))

    stale = ChildRun(world, name, day, failpoints="after_audit=stop")
    try:
        stopped_at = stale.wait_stopped()
        assert stage_branches(world, name, day), "the frozen run staged nothing"
        wait_stale(world, name, day)
        taker = materialize_here(world, name, day)
        assert taker.success, failure_text(taker)
        taken_at = time.monotonic()
        taker_rows = published(world, name, day)
        taker_publish = current_publish(world, name)
        assert taker_publish.get("run_id") == taker.run_id

        stale.cont()
        stale.wait_exit(timeout_s=180)
        outcome = stale.result()
    finally:
        stale.close()

    assert not outcome["success"], "the stale run reported success"
    assert "not published" in outcome["error"] and "lost its claim" in outcome["error"], outcome["error"]
    # The table still shows the taker's publish; no commit of the stale run came after it.
    assert current_publish(world, name) == taker_publish
    assert published(world, name, day) == taker_rows
    assert stage_branches(world, name, day) == []
    rows = {r.attempt: r for r in attempts(world, name, day)}
    first, second = rows[base + 1], rows[base + 2]
    assert first.run_id == outcome["run_id"] and first.status == FAILURE
    assert "heartbeat lost" in first.error and taker.run_id in first.error
    assert second.run_id == taker.run_id and second.status == SUCCESS
    assert max(rows) == base + 2, "the stale run recorded another attempt"
    compared = assert_equals_reference(world, name, day, taker_rows)
    record(
        "5 SIGSTOP past the claim timeout, taken over, SIGCONT",
        world.backend,
        table=name,
        day=day,
        recovery_s=taken_at - stopped_at,
        rows_compared=compared,
    )


def test_heartbeat_during_takeover_keeps_the_holder(world):
    name, day = "ods/orders", D2
    prepare(world, name, day)
    base = len(attempts(world, name, day))
    jl = world.job_log()

    holder = ChildRun(world, name, day, failpoints="after_claim=stop")
    fired: list[float] = []

    def beat_in_between(judged_stale) -> None:
        """Between the takeover's read and its compare-and-set: resume the holder, wait for its heartbeat."""
        holder.cont()
        deadline = time.monotonic() + 60
        while claim_row(world, name, day).heartbeat_time == judged_stale.heartbeat_time:
            assert time.monotonic() < deadline, "the resumed holder sent no heartbeat"
            time.sleep(0.05)
        fired.append(time.monotonic())

    try:
        holder.wait_stopped()
        wait_stale(world, name, day)
        jl.takeover_hook = beat_in_between
        try:
            started = time.monotonic()
            refused = materialize_here(world, name, day)
        finally:
            jl.takeover_hook = None
        assert len(fired) == 1, "the takeover never judged the holder stale"
        assert not refused.success
        text = failure_text(refused)
        assert holder.wait_exit(timeout_s=240) == 0
        outcome = holder.result()
        done_at = time.monotonic()
    finally:
        holder.close()

    assert outcome["success"], outcome["error"]
    assert "duplicate run refused" in text and outcome["run_id"] in text, text
    rows = attempts(world, name, day)[base:]
    assert [(r.attempt, r.status, r.run_id) for r in rows] == [(base + 1, SUCCESS, outcome["run_id"])]
    assert current_publish(world, name).get("run_id") == outcome["run_id"]
    compared = assert_equals_reference(world, name, day, published(world, name, day))
    record(
        "9 heartbeat during a takeover",
        world.backend,
        table=name,
        day=day,
        recovery_s=done_at - started,
        rows_compared=compared,
    )
