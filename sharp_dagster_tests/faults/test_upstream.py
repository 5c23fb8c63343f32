"""Fault 10: a downstream partition launched by hand while its upstream's last run FAILED.

`ods/order_item [D1]` had published; a re-run of it then fails (a fault raised after its audit: the job log says
FAILURE, its previous rows stay). `dwd/order_detail [D1]`, materialized directly (the UI's path), is refused before
anything is read, the refusal naming the upstream partition and its status, and recorded as the downstream's
FAILURE. Once the upstream is re-run, the downstream runs and its rows equal a fault-free run's.
"""

from __future__ import annotations

import time

from sharp_dagster.joblog import FAILURE, SUCCESS
from sharp_dagster_tests.faults.harness import (
    D1,
    assert_equals_reference,
    attempts,
    ensure_success,
    failure_text,
    materialize_here,
    prepare,
    published,
    record,
)

UPSTREAM, DOWNSTREAM = "ods/order_item", "dwd/order_detail"


def test_downstream_refused_while_upstream_failed(world, monkeypatch):
    day = D1
    prepare(world, DOWNSTREAM, day)
    ensure_success(world, UPSTREAM, day)
    upstream_rows = published(world, UPSTREAM, day)
    downstream_before = published(world, DOWNSTREAM, day)
    base = len(attempts(world, DOWNSTREAM, day))

    monkeypatch.setenv("SHARP_FAILPOINTS", "after_audit=raise")
    failed = materialize_here(world, UPSTREAM, day)
    monkeypatch.delenv("SHARP_FAILPOINTS")
    assert not failed.success and "fail point after_audit" in failure_text(failed)
    assert attempts(world, UPSTREAM, day)[-1].status == FAILURE
    assert published(world, UPSTREAM, day) == upstream_rows, "the failed upstream run changed its rows"

    refused = materialize_here(world, DOWNSTREAM, day)
    refused_at = time.monotonic()
    assert not refused.success
    text = failure_text(refused)
    assert f"{DOWNSTREAM} [{day}] refused" in text and f"{UPSTREAM} [{day}]: FAILURE" in text, text
    assert "ods/orders [" not in text and "ods/product [" not in text, text
    attempt = attempts(world, DOWNSTREAM, day)[-1]
    assert (attempt.attempt, attempt.status) == (base + 1, FAILURE)
    assert f"{UPSTREAM} [{day}]: FAILURE" in attempt.error
    steps = {s.step_id: s.status for s in world.job_log().steps(attempt.job_id)}
    assert steps.get("checkdone") == FAILURE and "write" not in steps, steps
    assert published(world, DOWNSTREAM, day) == downstream_before, "the refused run wrote rows"

    repaired = materialize_here(world, UPSTREAM, day)
    assert repaired.success, failure_text(repaired)
    ran = materialize_here(world, DOWNSTREAM, day)
    assert ran.success, failure_text(ran)
    recovery_s = time.monotonic() - refused_at
    assert attempts(world, DOWNSTREAM, day)[-1].status == SUCCESS
    compared = assert_equals_reference(world, DOWNSTREAM, day, published(world, DOWNSTREAM, day))
    record(
        "10 downstream launched while its upstream FAILED",
        world.backend,
        table=DOWNSTREAM,
        day=day,
        recovery_s=recovery_s,
        rows_compared=compared,
    )
