"""A run of `ods/product` killed with SIGKILL after staging and auditing, before publishing, and the run that takes
over after the heartbeat timeout: the scenario `test_kill.py` runs with the job log on SQLite and
`test_kill_postgres.py` on PostgreSQL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from dagster import AssetKey, materialize

from sharp_dagster.cdc.ods import store as ods_store
from sharp_dagster.spark.tables import TableRef

KEY = AssetKey(["ods", "product"])
DAY = "2024-01-01"

# The child run stops itself once its rows are staged and audited, before the fence and the publish
# (`failpoints.py`); the test then kills it there.
CHILD = textwrap.dedent(
    """
    from dagster import AssetKey, DagsterInstance, materialize
    from sharp_dagster.definitions import defs
    materialize(list(defs.assets), selection=[AssetKey(["ods", "product"])], partition_key="2024-01-01",
                instance=DagsterInstance.ephemeral(), resources=defs.resources)
    """
)


def stopped(pid: int) -> bool:
    """Is the process stopped (SIGSTOP: state `T` in /proc/<pid>/stat)?"""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] == "T"


def run_product(defs, instance, day=DAY):
    return materialize(
        list(defs.assets),
        selection=[KEY],
        partition_key=day,
        instance=instance,
        resources=defs.resources,
        raise_on_error=False,
    )


def table_state(defs) -> tuple[int | None, dict[str, int]]:
    """`ods.product`'s current snapshot and its staging branches."""
    store = defs.resources["spark"].store()
    ref = TableRef("ods", "product")
    return store.current_snapshot_id(ref), store.staged_branches(ref)


def day_rows(spark) -> list[tuple]:
    """The published rows of DAY: its tag."""
    return sorted(tuple(r) for r in spark.sql(f"SELECT * FROM ods.product VERSION AS OF '{DAY}'").collect())


def kill_then_takeover(feed, spark, tmp_path, monkeypatch):
    from sharp_dagster.logdriven import job_log

    defs, instance = feed.defs, feed.instance
    feed.land(DAY)
    assert run_product(defs, instance).success
    before_snapshot, branches = table_state(defs)
    assert branches == {}
    before_rows = day_rows(spark)

    env = {**os.environ, "SHARP_FAILPOINTS": "after_audit=stop"}
    child = subprocess.Popen([sys.executable, "-c", CHILD], env=env, start_new_session=True)
    try:
        # A child starting Spark and Dagster on a busy 2-core machine: minutes, not seconds.
        deadline = time.monotonic() + 600
        while not stopped(child.pid):
            assert child.poll() is None, "the child run ended before it staged its rows"
            assert time.monotonic() < deadline, "the child never reached the write"
            time.sleep(0.5)
        jl = job_log()
        holder = next(r for r in jl.running("ods/product"))
        assert holder.partition_key == DAY and holder.attempt == 2

        # While the killed-to-be run holds the period, a second run is refused naming the holder.
        refused = run_product(defs, instance)
        assert not refused.success
        message = next(e for e in refused.all_events if e.is_step_failure).step_failure_data.error.message
        assert "duplicate run refused" in message and holder.run_id in message
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait(timeout=60)

    # Killed after staging: the table's main is untouched (its staging branch is left) and the job log still
    # says RUNNING.
    snapshot, branches = table_state(defs)
    assert snapshot == before_snapshot and len(branches) == 1, branches
    assert day_rows(spark) == before_rows
    assert [r.status for r in jl.recent("ods/product") if r.attempt == 2] == ["RUNNING"]

    # After the heartbeat timeout the next run takes over and succeeds.
    monkeypatch.setenv("SHARP_CLAIM_TIMEOUT_S", "3")
    time.sleep(4)
    assert run_product(defs, instance).success
    by_attempt = {r.attempt: r for r in jl.recent("ods/product", limit=10) if r.partition_key == DAY}
    assert by_attempt[2].status == "FAILURE" and "heartbeat lost" in by_attempt[2].error
    assert by_attempt[3].status == "SUCCESS"
    assert not list(jl.running("ods/product"))
    # The taker dropped the killed attempt's staging branches (of ods.product and ods_state.product), published,
    # and its publish step names the day's tag it moved.
    snapshot, branches = table_state(defs)
    assert branches == {} and snapshot != before_snapshot
    assert defs.resources["spark"].store().staged_branches(TableRef("ods_state", "product")) == {}
    assert (
        ods_store.ref_snapshot(defs.resources["spark"].store(), TableRef("ods", "product"), DAY) == snapshot
    )
    publish = next(s for s in jl.steps(by_attempt[3].job_id) if s.step_id == "publish")
    assert f"published ods.product {DAY} as snapshot {snapshot}" in publish.output, publish.output
