"""Fault 7: the job-log database (PostgreSQL, which also holds the Iceberg catalog) goes away mid-run and comes back.

A run is frozen right after its claim; the server is shut down (fast shutdown, by its pid; data kept); the run is
resumed with no database: it must publish nothing. The server comes back on the same data and port; the dead run's
attempt is still RUNNING (it could record nothing), so the next run (a fresh process) takes it over once the claim timed out, ends it
FAILURE with the reason, and publishes rows equal to a fault-free run's.
"""

from __future__ import annotations

import time

from sharp_dagster.joblog import FAILURE, RUNNING, SUCCESS
from sharp_dagster_tests.faults.harness import (
    D2,
    ChildRun,
    assert_equals_reference,
    attempts,
    claim_row,
    point_catalog,
    prepare,
    published,
    record,
    stage_branches,
    wait_stale,
)


def test_job_log_database_down_mid_run_then_back(pg_world):
    world, name, day = pg_world, "ods/order_item", D2
    prepare(world, name, day)
    base = len(attempts(world, name, day))
    before = published(world, name, day)

    run = ChildRun(world, name, day, failpoints="after_claim=stop")
    try:
        run.wait_stopped()
        world.pg.halt()
        down_at = time.monotonic()
        try:
            run.cont()
            run.wait_exit(timeout_s=300)
            outcome = run.result()
        finally:
            world.pg.resume()
        down_s = time.monotonic() - down_at
    finally:
        run.close()
    # This test process's own Iceberg catalog still pools connections the shutdown ended; Iceberg's JDBC pool does
    # not retry PostgreSQL's "terminating connection due to administrator command" (57P01), so its first call would
    # fail. The runs under test are fresh processes (as Dagster's default launcher makes them); the test's reader is
    # given a fresh catalog.
    point_catalog()

    assert not outcome["success"], "a run without its job-log database reported success"
    assert published(world, name, day) == before, "the run published without its database"
    dead = attempts(world, name, day)[-1]
    assert dead.attempt == base + 1 and dead.run_id == outcome["run_id"]
    assert dead.status in (RUNNING, FAILURE), (
        dead.status
    )  # it could not record its end with the database down
    if dead.status == RUNNING:
        wait_stale(world, name, day)
    else:
        assert claim_row(world, name, day) is None
    recovery = ChildRun(world, name, day)  # the next run, in a process of its own
    try:
        recovery.wait_exit(timeout_s=300)
        recovered = recovery.result()
    finally:
        recovery.close()
    recovery_s = time.monotonic() - down_at
    assert recovered["success"], recovered["error"]

    rows = {r.attempt: r for r in attempts(world, name, day)}
    assert rows[base + 1].status == FAILURE and rows[base + 1].error
    if dead.status == RUNNING:
        assert "heartbeat lost" in rows[base + 1].error
    assert rows[base + 2].status == SUCCESS and rows[base + 2].run_id == recovered["run_id"]
    assert stage_branches(world, name, day) == []
    compared = assert_equals_reference(world, name, day, published(world, name, day))
    record(
        "7 job-log database (PostgreSQL) down mid-run, then back",
        world.backend,
        table=name,
        day=day,
        database_down_s=down_s,
        dead_attempt_status=dead.status,
        recovery_s=recovery_s,
        rows_compared=compared,
    )
