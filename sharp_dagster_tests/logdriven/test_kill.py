"""A run killed with SIGKILL after staging and auditing, before publishing: the partition keeps its old data, the job log shows RUNNING, a second
run is refused while the heartbeat is fresh, and after the timeout the next run takes over and succeeds."""

from __future__ import annotations

from sharp_dagster.cdc.ods import store as ods_store
from sharp_dagster.spark.tables import TableRef
from sharp_dagster_tests.logdriven.kill_support import (
    DAY,
    kill_then_takeover,
    run_product,
)


def test_sigkill_mid_write_then_takeover(feed, spark, tmp_path, monkeypatch):
    kill_then_takeover(feed, spark, tmp_path, monkeypatch)


def test_an_ods_publish_is_fenced_when_main_moved_since_its_branch_was_cut(feed, spark, monkeypatch):
    """Past the job log's fence, the ODS table's own: another writer commits to `ods.product`'s `main` between the
    run's job-log fence and its reference commit. The publish is refused (`StalePublishError`: `main` is not the
    head the branch was cut from), nothing of the run is published or left staged, the job log says FAILURE naming
    the fence; the next run publishes the day."""
    from sharp_dagster.cdc.ods import stage as ods_stage
    from sharp_dagster.logdriven import job_log

    defs, instance, day = feed.defs, feed.instance, "2024-01-02"
    store, ref = defs.resources["spark"].store(), TableRef("ods", "product")
    for landed in (DAY, day):
        if landed not in feed.landed:
            feed.land(landed)
    if DAY not in ods_store.published_days(store, "product"):
        assert run_product(defs, instance).success
    publish, moved = ods_stage.StagedOds.publish, []

    def another_writer_first(staged, tables):
        tables.java_table(ref).newFastAppend().commit()  # an empty commit of another writer: `main` moves
        tables.refresh(ref)
        moved.append(tables.current_snapshot_id(ref))
        return publish(staged, tables)

    monkeypatch.setattr(ods_stage.StagedOds, "publish", another_writer_first)
    result = run_product(defs, instance, day)
    assert not result.success
    message = next(e for e in result.all_events if e.is_step_failure).step_failure_data.error.message
    assert f"ods/product [{day}]" in message and "not published" in message and "main moved" in message, (
        message
    )
    assert day not in ods_store.published_days(store, "product")
    assert store.current_snapshot_id(ref) == moved[0], "main is the other writer's commit"
    assert store.staged_branches(ref) == store.staged_branches(TableRef("ods_state", "product")) == {}
    jl = job_log()
    latest = max((r for r in jl.recent("ods/product") if r.partition_key == day), key=lambda r: r.attempt)
    assert latest.status == "FAILURE" and "main moved" in latest.error

    monkeypatch.setattr(ods_stage.StagedOds, "publish", publish)
    assert run_product(defs, instance, day).success
    assert ods_store.ref_snapshot(store, ref, day) == store.current_snapshot_id(ref)
