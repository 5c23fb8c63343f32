"""Fault 6: ten processes claim the same partition at the same moment; exactly one runs.

Ten child runs of one partition start (each a full Dagster run in a process of its own); each waits at the claim
until all ten are there, then all claim at once. Every child is armed to freeze right after a won claim, so the
winner still holds the period while the nine others are refused, however slow the machine; then it is resumed.
One attempt in the job log, SUCCESS; nine refusals naming the winner's run, none of which started Spark (the
warehouse opens after the claim: `publish/warehouse.py`); the rows equal a fault-free run's.
"""

from __future__ import annotations

import time

from sharp_dagster.joblog import SUCCESS
from sharp_dagster_tests.faults.harness import (
    D3,
    ChildRun,
    assert_equals_reference,
    attempts,
    prepare,
    proc_state,
    published,
    record,
)

RUNNERS = 10


def test_ten_simultaneous_claims_one_runs(world, tmp_path):
    name, day = "ods/user_info", D3
    prepare(world, name, day)
    base = len(attempts(world, name, day))
    gate = tmp_path / "gate"
    gate.mkdir()
    # A long claim timeout: a winner frozen on purpose must not look stale to the others.
    children = [
        ChildRun(
            world, name, day, failpoints="after_claim=stop", claim_timeout_s=600, gate=gate, logs=tmp_path
        )
        for _ in range(RUNNERS)
    ]
    try:
        deadline = time.monotonic() + 600
        while len(list(gate.glob("ready-*"))) < RUNNERS:
            for c in children:
                assert c.proc.poll() is None, f"a child ended before its claim: {c.tail()}"
            assert time.monotonic() < deadline, "the children did not all reach the claim"
            time.sleep(0.2)
        (gate / "go").touch()
        released = time.monotonic()

        # Nine end refused; one freezes after its claim.
        deadline = time.monotonic() + 300
        while True:
            ended = [c for c in children if c.proc.poll() is not None]
            frozen = [c for c in children if proc_state(c.pid) == "T"]
            if len(ended) == RUNNERS - 1 and len(frozen) == 1:
                break
            assert len(ended) < RUNNERS, "every child ended: none holds the claim"
            assert time.monotonic() < deadline, f"{len(ended)} ended, {len(frozen)} frozen after 300 s"
            time.sleep(0.2)
        claims_settled = time.monotonic() - released
        [winner] = frozen
        winner.cont()
        winner.wait_exit(timeout_s=300)
        done = time.monotonic() - released
    finally:
        for c in children:
            c.close()

    won = winner.result()
    assert won["success"], won["error"]
    losers = [c.result() for c in children if c is not winner]
    for lost in losers:
        assert not lost["success"]
        assert "duplicate run refused" in lost["error"] and won["run_id"] in lost["error"], lost["error"]
        assert not lost["spark"], "a run refused at its claim started a Spark driver"
    assert won["spark"]
    rows = attempts(world, name, day)[base:]
    assert [(r.attempt, r.status, r.run_id) for r in rows] == [(base + 1, SUCCESS, won["run_id"])]
    compared = assert_equals_reference(world, name, day, published(world, name, day))
    record(
        "6 ten processes claim one partition at once",
        world.backend,
        table=name,
        day=day,
        claims_settled_s=claims_settled,
        recovery_s=done,
        rows_compared=compared,
        refused=len(losers),
    )
