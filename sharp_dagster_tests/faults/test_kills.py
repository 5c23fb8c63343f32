"""Faults 1-4: a run SIGKILLed at each step of the lifecycle (after the claim, mid-write, after the audit, after the
publish but before SUCCESS). Each kills the FIRST run of a fresh partition, so what the kill left is visible: no
rows on `main` unless the publish happened, a staging branch when the write had started, the job log RUNNING. The
next run, once the claim timed out, takes over: the dead attempt ends FAILURE ("heartbeat lost"), the new one
SUCCESS, its staging branch cleaned, and the rows equal a fault-free run's, row for row.

Each kill point runs on one backend (`on_backend`), each backend taking over after one kill that left a staging
branch and one that did not; SHARP_FAULTS_BOTH_BACKENDS=1 runs all four on both.
"""

from __future__ import annotations

import time

from sharp_dagster.joblog import FAILURE, RUNNING, SUCCESS
from sharp_dagster_tests.faults.harness import (
    D1,
    D2,
    ChildRun,
    assert_equals_reference,
    attempts,
    current_publish,
    failure_text,
    materialize_here,
    on_backend,
    prepare,
    published,
    record,
    stage_branches,
    wait_stale,
)


def kill_at(world, name: str, day: str, point: str, fault: str) -> None:
    prepare(world, name, day)
    base = attempts(world, name, day)
    assert not base or base[-1].status != RUNNING, "a run of the partition is still running"
    fresh = not base  # the first run of the partition: nothing on `main` yet
    before = published(world, name, day)

    child = ChildRun(world, name, day, failpoints=f"{point}=stop")
    try:
        child.wait_stopped()
        killed_at = child.kill()  # frozen exactly at the point, then killed: no cleanup code runs
    finally:
        child.close()

    rows = attempts(world, name, day)
    dead = rows[-1]
    assert dead.attempt == len(base) + 1 and dead.status == RUNNING, "the killed run's attempt is not RUNNING"
    after_kill = published(world, name, day)
    branches = stage_branches(world, name, day)
    if point == "after_publish":
        assert after_kill, "the publish before the kill left no rows"
        assert current_publish(world, name).get("attempt") == str(dead.attempt)
    else:
        assert after_kill == before, f"killed {point}: the rows on main changed"
        if fresh:
            assert after_kill == []
    if point in ("mid_write", "after_audit"):
        assert branches, f"killed {point}: no staging branch left (did the run stage?)"
    else:
        assert not branches

    # A second run while the dead one's heartbeat is fresh would be refused; after the timeout it takes over.
    wait_stale(world, name, day)
    recovered = materialize_here(world, name, day)
    recovery_s = time.monotonic() - killed_at
    assert recovered.success, failure_text(recovered)

    rows = attempts(world, name, day)
    by_attempt = {r.attempt: r for r in rows}
    assert by_attempt[dead.attempt].status == FAILURE and "heartbeat lost" in by_attempt[dead.attempt].error
    assert by_attempt[dead.attempt + 1].status == SUCCESS
    assert by_attempt[dead.attempt + 1].run_id == recovered.run_id
    assert current_publish(world, name).get("run_id") == recovered.run_id
    assert stage_branches(world, name, day) == [], "the dead attempt's staging branch was not cleaned"
    compared = assert_equals_reference(world, name, day, published(world, name, day))
    record(
        fault,
        world.backend,
        table=name,
        day=day,
        recovery_s=recovery_s,
        rows_compared=compared,
        attempts=[(r.attempt, r.status) for r in attempts(world, name, day)][-3:],
    )


@on_backend("postgresql")
def test_sigkill_after_claim(world):
    kill_at(world, "ods/product", D1, "after_claim", "1 SIGKILL after the claim")


@on_backend("sqlite")
def test_sigkill_mid_write(world):
    # D2: the table exists (D1 made it), so the kill leaves a real staging branch of a real table behind.
    kill_at(world, "ods/user_info", D2, "mid_write", "2 SIGKILL mid-write")


@on_backend("postgresql")
def test_sigkill_after_audit_before_publish(world):
    kill_at(world, "ods/orders", D1, "after_audit", "3 SIGKILL after the audit, before the publish")


@on_backend("sqlite")
def test_sigkill_after_publish_before_success(world):
    kill_at(world, "ods/order_item", D1, "after_publish", "4 SIGKILL after the publish, before SUCCESS")
