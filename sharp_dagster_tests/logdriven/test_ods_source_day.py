"""A source's ODS day is one run of its multi-asset (`assets/ods_source.py`), each table its own asset: a strong
rule failing in one table publishes the others (tag, job log, materialization) and holds back that one and what
reads it.

Each test builds its own state on a data folder and broker of its own (`own_feed`)."""

from __future__ import annotations

from dagster import AssetKey

from sharp_dagster.spark.tables import TableRef
from sharp_dagster_tests.cdc_support import change
from sharp_dagster_tests.logdriven.range_support import DETAIL

DAY = "2024-01-01"


def day_tags(spark, table):
    spark.catalog.refreshTable(f"ods.{table}")
    return {r.name for r in spark.sql(f"SELECT name FROM ods.{table}.refs WHERE type = 'TAG'").collect()}


def test_a_strong_rule_failing_in_one_table_publishes_the_others_of_the_source_day(
    own_feed, spark, monkeypatch
):
    from dagster import materialize
    from pyspark.sql import SparkSession

    from sharp_dagster.logdriven import job_log
    from sharp_dagster.warehouse.cdc_layout import ods_tables

    feed, jl = own_feed, job_log()
    when = f"{DAY} 12:00:00"
    bad = change(
        "orders", "c", 10**6, when, order_id=900001, user_id=1, order_time=when, total_amount=1.0,
        updated_at=when, order_status="lost_in_the_mail",
    )  # fmt: skip
    feed.land(DAY, extra=[bad])
    tables = sorted(t.name for t in ods_tables() if t.database == "shop")
    assert "orders" in tables and len(tables) >= 3, tables
    keys = [AssetKey(["ods", t]) for t in tables]
    metadata_reads = []
    sql = SparkSession.sql

    def counted(self, query, *args, **kwargs):
        if ".partitions" in query:
            metadata_reads.append(query)
        return sql(self, query, *args, **kwargs)

    monkeypatch.setattr(SparkSession, "sql", counted)
    result = materialize(
        list(feed.defs.assets),
        selection=[*keys, DETAIL],
        instance=feed.instance,
        resources=feed.defs.resources,
        partition_key=DAY,
        raise_on_error=False,
    )
    assert not result.success
    monkeypatch.setattr(SparkSession, "sql", sql)
    raw_reads = [q for q in metadata_reads if "original_binlog" in q]
    assert len(raw_reads) == 1, (
        f"the raw binlog's partition metadata read once for {len(tables)} tables: {raw_reads}"
    )
    ods_steps = {e.step_key for e in result.all_events if e.step_key and e.step_key.startswith("ods_source_")}
    assert ods_steps == {"ods_source_shop"}, f"the source's tables in one step: {ods_steps}"
    failure = next(e for e in result.all_events if e.is_step_failure).step_failure_data.error.message
    assert "1 of" in failure and "(ods/orders)" in failure and "status_known" in failure, failure

    published = sorted(
        e.step_materialization_data.materialization.asset_key.path[-1]
        for e in result.all_events
        if e.is_step_materialization
    )
    others = [t for t in tables if t != "orders"]
    assert published == others, "every other table materialized; not orders, not what reads it"
    for table in others:
        assert DAY in day_tags(spark, table), f"ods.{table} published (its day tagged)"
    assert DAY not in day_tags(spark, "orders"), "ods.orders holds the day back"
    store = feed.defs.resources["spark"].store()
    assert store.staged_branches(TableRef("ods", "orders")) == {}, "its staging branch dropped"
    status = {t: [r.status for r in jl.recent(f"ods/{t}", limit=10)] for t in tables}
    assert status == {t: ["FAILURE" if t == "orders" else "SUCCESS"] for t in tables}, status
    assert not jl.recent(DETAIL.to_user_string(), limit=10), "dwd/order_detail (reads ods/orders) never ran"
    failed_checks = [
        e.event_specific_data.check_name
        for e in result.all_events
        if e.event_type_value == "ASSET_CHECK_EVALUATION" and not e.event_specific_data.passed
    ]
    assert failed_checks == ["status_known"], failed_checks


def request(name, day, attempt):
    from dagster import RunRequest

    from sharp_dagster.sensors.log_driven import ASSET_TAG

    return RunRequest(
        run_key=f"{name}:{day}:attempt-{attempt}",
        partition_key=day,
        asset_selection=[AssetKey(name.split("/"))],
        tags={ASSET_TAG: name},
    )


def test_the_sensor_launches_a_databases_tables_pending_on_one_day_as_one_run():
    """The heads of one database's ODS tables on the same day go as one request; another day, another asset and
    another set of tables (same count, same attempts) are other runs, never one run key twice."""
    from sharp_dagster.sensors.log_driven import run_together

    together = {f"ods/{t}": "ods_db" for t in "abcd"}
    day2 = "2024-01-02"
    out = run_together(
        [
            request("ods/a", DAY, 1),
            request("ods/b", DAY, 2),
            request("ods/c", day2, 1),
            request("dwd/x", DAY, 1),
        ],
        together,
    )
    by = {tuple(k.to_user_string() for k in r.asset_selection): r for r in out}
    assert set(by) == {("ods/a", "ods/b"), ("ods/c",), ("dwd/x",)}, sorted(by)
    assert by[("ods/a", "ods/b")].partition_key == DAY
    assert by[("ods/a", "ods/b")].run_key.startswith(f"ods_db:{DAY}:2 assets:")
    assert (
        by[("ods/c",)].run_key == f"ods/c:{day2}:attempt-1"
        and by[("dwd/x",)].run_key == f"dwd/x:{DAY}:attempt-1"
    )
    keys = {
        run_together([request(f"ods/{x}", DAY, 1), request(f"ods/{y}", DAY, n)], together)[0].run_key
        for x, y, n in [("a", "b", 1), ("c", "d", 1), ("a", "b", 2)]
    }
    assert len(keys) == 3, "other tables or another attempt: another run key"
