"""The ODS asset's schema check `ods_schema`: a staged day that renames a column `dwd/order_detail.sql` reads names
every DWD/ADS column it breaks, with file and line, exactly as `sharp-dagster lineage impact` names them; strong
(the default, `schema_check:` in the source's YAML) holds the day, weak publishes it and alerts.

Until the ODS merge follows a binlog RENAME COLUMN (issue 43's DDL part), the rename is made here on the staged
table itself, right after the day's merge staged it (`ALTER TABLE ods.orders RENAME COLUMN`, which keeps the
field id, as the merge's own ALTER will). The check reads only the Iceberg schemas, so once the merge applies a
binlog rename the same check fires from it: the intended end-to-end test lands `RENAME COLUMN order_status TO
status` through the collector and expects this test's held day and job-log lines."""

from __future__ import annotations

import dataclasses
import json

from dagster import AssetKey, materialize
from sqlalchemy import select

from sharp_dagster.cdc.ods import stage as ods_stage
from sharp_dagster.cdc.ods import store as ods_store
from sharp_dagster.spark.tables import TableRef
from sharp_dagster_tests.lineage.util import run_direct

DAYS = ["2024-01-01", "2024-01-02", "2024-01-03"]
ORDERS = AssetKey(["ods", "orders"])


def assets_with(feed, schema_check):
    """The project's assets, the shop's ODS multi-asset built by its own factory with the source's `schema_check`
    set for ods/orders."""
    from dagster import AssetsDefinition

    from sharp_dagster import definitions
    from sharp_dagster.assets.ods_source import build_ods_source_asset
    from sharp_dagster.warehouse.cdc_layout import ods_tables

    table = next(t for t in ods_tables() if t.name == "orders")
    table = dataclasses.replace(table, source=dataclasses.replace(table.source, schema_check=schema_check))
    tables = [table if t.name == "orders" else t for t in ods_tables() if t.database == table.database]
    source = build_ods_source_asset(
        table.database, tables, definitions.RULES, definitions.GRAINS, definitions.LAYOUT.log_assets
    )
    others = [a for a in feed.defs.assets if not (isinstance(a, AssetsDefinition) and a.keys & source.keys)]
    return [*others, source]


def run_days(feed, assets, first, last):
    """What a (single-run) backfill of `first..last` launches: one run; one day when they are the same."""
    return materialize(
        assets, selection=[ORDERS], instance=feed.instance, resources=feed.defs.resources, raise_on_error=False,
        tags={"dagster/asset_partition_range_start": first, "dagster/asset_partition_range_end": last},
    )  # fmt: skip


def renaming_after_the_merge(monkeypatch, spark, old, new):
    """Each staging of the day merges it, then renames the staged table's column (what the DDL part's merge will
    do); a staging again (the batch abandoned, then the day alone) starts from the column as the day before had it:
    Iceberg's schema is the table's, so the dropped branch left the rename behind."""
    real = ods_stage.stage

    def stage(store, table, *args, **kwargs):
        if table == "orders" and new in spark.table("ods.orders").columns:
            spark.sql(f"ALTER TABLE ods.orders RENAME COLUMN {new} TO {old}")
        staged = real(store, table, *args, **kwargs)
        if table == "orders":
            spark.sql(f"ALTER TABLE ods.orders RENAME COLUMN {old} TO {new}")
        return staged

    monkeypatch.setattr(ods_stage, "stage", stage)


def schema_check_of(result):
    found = [
        e.event_specific_data
        for e in result.all_events
        if e.event_type_value == "ASSET_CHECK_EVALUATION" and e.event_specific_data.check_name == "ods_schema"
    ]
    assert len(found) == 1, found
    return found[0]


def latest(jl, day):
    return max(
        (r for r in jl.recent("ods/orders", limit=100) if r.partition_key == day), key=lambda r: r.attempt
    )


def schema_step(jl, run):
    return next(s for s in jl.steps(run.job_id) if s.step_id == "schema_check")


def test_a_renamed_column_dwd_reads_holds_the_day_when_strong_and_alerts_when_weak(
    own_feed, spark, monkeypatch, capsys
):
    from sharp_dagster.logdriven import job_log

    feed, jl = own_feed, job_log()
    for day in DAYS:
        feed.land(day)
    strong = assets_with(feed, "strong")
    first = run_days(feed, strong, DAYS[0], DAYS[0])
    assert first.success and schema_check_of(first).passed
    assert "no column dropped, renamed or retyped since" in schema_step(jl, latest(jl, DAYS[0])).output

    # What `sharp-dagster lineage impact --json ods.orders.order_status` prints: the check names the same.
    assert run_direct(["lineage", "impact", "--json", "ods.orders.order_status"]) == 0
    expected = json.loads(capsys.readouterr().out)
    assert {(i["table"], i["column"]) for i in expected} >= {
        ("dwd.order_detail", "order_status"), ("dwd.order_detail", "is_cancelled"),
        ("ads.gmv_by_category", "*"), ("ads.user_order_stats", "*"),
    }  # fmt: skip
    store = feed.defs.resources["spark"].store()
    ref = TableRef("ods", "orders")
    main_before = store.current_snapshot_id(ref)

    # Strong: the day is held. No tag, main as it was, FAILURE naming the columns, a failed blocking check. A
    # backfill of days 2..3 as one batch is abandoned, then day 2 alone is held and day 3 never runs.
    renaming_after_the_merge(monkeypatch, spark, "order_status", "status")
    held = run_days(feed, strong, DAYS[1], DAYS[2])
    assert not held.success
    check = schema_check_of(held)
    assert not check.passed and check.blocking and check.severity.value == "ERROR"
    assert check.metadata["impacted"].data == expected
    changes = check.metadata["schema_changes"].data
    assert [(c["kind"], c["column"], c["new_name"]) for c in changes] == [
        ("rename", "order_status", "status")
    ]
    assert ods_store.ref_snapshot(store, ref, DAYS[1]) is None, "no tag: the day is held"
    assert ods_store.ref_snapshot(store, ref, DAYS[2]) is None
    assert sorted((r.partition_key, r.status) for r in jl.recent("ods/orders", limit=100)) == [
        (DAYS[0], "SUCCESS"), (DAYS[1], "FAILURE"),
    ]  # fmt: skip
    assert store.current_snapshot_id(ref) == main_before and store.staged_branches(ref) == {}
    attempt = latest(jl, DAYS[1])
    assert attempt.status == "FAILURE"
    for said in ("order_status renamed to status", "dwd.order_detail.order_status", "dwd/order_detail.sql:9",
                 "dwd.order_detail.is_cancelled", "dwd/order_detail.sql:17", "ads.gmv_by_category.*"):  # fmt: skip
        assert said in attempt.error, (said, attempt.error)
    step = schema_step(jl, attempt)
    assert step.failure_count == len(expected)
    for i in expected:
        line = f"ods.orders.order_status -> {i['table']}.{i['column']} ({i['kind']}"
        assert line in step.output, (line, step.output)
    assert "dwd/order_detail.sql:9" in step.output

    # Weak: the same rename publishes the day (tagged), the check warns with the same columns and an alert is sent.
    warned = run_days(feed, assets_with(feed, "weak"), DAYS[1], DAYS[1])
    assert warned.success
    check = schema_check_of(warned)
    assert not check.passed and not check.blocking and check.severity.value == "WARN"
    assert check.metadata["impacted"].data == expected
    assert ods_store.ref_snapshot(store, ref, DAYS[1]) is not None, "published: the day is tagged"
    attempt = latest(jl, DAYS[1])
    assert attempt.status == "SUCCESS"
    assert "dwd/order_detail.sql:9" in schema_step(jl, attempt).output
    from sharp_dagster.joblog.models import alert_log

    with jl.engine.connect() as conn:
        keys = [r.dedup_key for r in conn.execute(select(alert_log)).all()]
    assert f"dqc:ods/orders:ods_schema:{DAYS[1]}" in keys, keys
