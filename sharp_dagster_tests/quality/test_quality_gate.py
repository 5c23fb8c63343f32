"""Strong rules keep bad data out; weak rules publish and alert once (issue: data-quality rules as checks)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from dagster import AssetCheckKey, AssetKey, materialize
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus
from sqlalchemy import select

from sharp_dagster_tests.cdc_support import change

CHAIN = [["ods", "orders"], ["ods", "order_item"], ["ods", "product"], ["dwd", "order_detail"]]


@pytest.fixture()
def env(own_feed):
    """A data folder, broker and Dagster instance of the test's own (each test builds the state it needs)."""
    from sharp_dagster.logdriven import job_log

    return own_feed.defs, own_feed.instance, job_log()


def run_day(defs, instance, day, keys=CHAIN):
    return materialize(
        list(defs.assets),
        selection=[AssetKey(k) for k in keys],
        partition_key=day,
        instance=instance,
        resources=defs.resources,
        raise_on_error=False,
    )


def rows(spark, table, day):
    """The published rows of `day`: an ODS table's tag (`VERSION AS OF '<day>'`), another table's partition."""
    spark.catalog.refreshTable(table)
    if table.startswith("ods."):
        return sorted(tuple(r) for r in spark.sql(f"SELECT * FROM {table} VERSION AS OF '{day}'").collect())
    return sorted(tuple(r) for r in spark.table(table).where(f"dt = '{day}'").collect())


def test_strong_rule_keeps_the_previous_partition(env, own_feed, spark):
    feed = own_feed
    defs, instance, jl = env
    for day in ("2024-01-01", "2024-01-02"):
        feed.land(day)
        assert run_day(defs, instance, day).success
    before = rows(spark, "ods.orders", "2024-01-02")
    some_order = before[0]
    # Bad input at the source: an order's status becomes 'lost' late on 2024-01-02; its binlog lands.
    row = {
        "order_id": some_order[0],
        "user_id": some_order[1],
        "order_time": "2024-01-01 10:00:00",
        "total_amount": 1.0,
        "updated_at": "2024-01-02 23:00:00",
    }
    feed.land(
        "2024-01-02",
        extra=[change("orders", "u", 10**6, "2024-01-02 23:00:00", order_status="lost", **row)],
        replay=False,
    )
    result = run_day(defs, instance, "2024-01-02")
    assert not result.success
    failure = next(e for e in result.all_events if e.is_step_failure)
    message = failure.step_failure_data.error.message
    assert "ods/orders [2024-01-02] not published" in message and "status_known" in message
    assert "actual 1" in message and "expected = 0" in message

    # The partition keeps its previous data; downstream did not run; the job log says FAILURE.
    assert rows(spark, "ods.orders", "2024-01-02") == before
    attempts = {
        (r.job_name, r.attempt): r.status for r in jl.recent(limit=100) if r.partition_key == "2024-01-02"
    }
    assert attempts[("ods/orders", 2)] == "FAILURE"
    assert ("dwd/order_detail", 2) not in attempts, "downstream did not run"

    # dqc_result holds the failed evaluation with its actual and expected values.
    from sharp_dagster.dqc.store import dqc_result

    with jl.engine.connect() as conn:
        stored = conn.execute(
            select(dqc_result).where(
                dqc_result.c.asset == "ods/orders",
                dqc_result.c.rule_id == "status_known",
                dqc_result.c.partition == "2024-01-02",
            )
        ).all()
    assert [(r.passed, r.actual, r.expected) for r in stored][-1] == (False, 1.0, 0.0)
    # The failing sample holds the rule's sample_key (order_id) only, never the offending row's values.
    samples = [json.loads(r.failing_keys) for r in stored if r.failing_keys]
    assert samples and all(set(key) == {"order_id"} for sample in samples for key in sample), samples
    assert "lost" not in json.dumps(samples)
    assert json.loads(stored[-1].failing_keys) == [{"order_id": some_order[0]}]

    # Dagster shows the failed check for that partition.
    history = instance.event_log_storage.get_asset_check_execution_history(
        AssetCheckKey(AssetKey(["ods", "orders"]), "status_known"), limit=5
    )
    assert (history[0].partition, history[0].status) == ("2024-01-02", AssetCheckExecutionRecordStatus.FAILED)

    # A later partition does not run while 2024-01-02 is FAILURE (ordered semantics).
    later = run_day(defs, instance, "2024-01-03", keys=[["ods", "orders"]])
    assert not later.success
    assert (
        "2024-01-02 (FAILURE"
        in next(e for e in later.all_events if e.is_step_failure).step_failure_data.error.message
    )

    # Fixed at the source (a later change), the partition runs again, in order, and the day after it too.
    feed.land(
        "2024-01-02",
        extra=[change("orders", "u", 10**6 + 1, "2024-01-02 23:30:00", order_status="paid", **row)],
        replay=False,
    )
    assert run_day(defs, instance, "2024-01-02").success
    feed.land("2024-01-03")
    assert run_day(defs, instance, "2024-01-03", keys=[["ods", "orders"], ["ods", "product"]]).success


class _Hook(BaseHTTPRequestHandler):
    received: list[dict] = []

    def do_POST(self):  # noqa: N802 - http.server's naming
        length = int(self.headers.get("Content-Length", 0))
        _Hook.received.append(json.loads(self.rfile.read(length)))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_weak_rule_publishes_and_alerts_once(env, own_feed, spark, monkeypatch):
    feed = own_feed
    defs, instance, jl = env
    # Ordered semantics: 2024-01-03 runs only after the two days before it, and order_detail needs the day's
    # orders and products.
    for day in ("2024-01-01", "2024-01-02", "2024-01-03"):
        feed.land(day)
    for day in ("2024-01-01", "2024-01-02"):
        assert run_day(defs, instance, day).success
    assert run_day(defs, instance, "2024-01-03", keys=[["ods", "orders"], ["ods", "product"]]).success
    server = HTTPServer(("127.0.0.1", 0), _Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("SHARP_ALERT_WEBHOOK_URL", f"http://127.0.0.1:{server.server_address[1]}/hook")
    _Hook.received.clear()
    bad_item = change(
        "order_item",
        "c",
        10**6 + 2,
        "2024-01-03 12:00:00",
        item_id=900001,
        order_id=1,
        product_id=1,
        quantity=1,
        unit_price=20000.0,
    )
    try:
        feed.land("2024-01-03", extra=[bad_item], replay=False)
        keys = [["ods", "order_item"], ["dwd", "order_detail"]]
        first = run_day(defs, instance, "2024-01-03", keys=keys)
        second = run_day(defs, instance, "2024-01-03", keys=keys)  # a re-run must not alert again
    finally:
        server.shutdown()
    assert first.success and second.success, "a weak rule never stops the pipeline"
    published = rows(spark, "ods.order_item", "2024-01-03")
    assert any(r[0] == 900001 for r in published), "the data was published"
    assert spark.table("dwd.order_detail").where("dt = '2024-01-03'").count() > 0, "downstream ran"
    mine = [m for m in _Hook.received if "unit_price_in_range" in json.dumps(m)]
    assert len(mine) == 1, _Hook.received
    assert "900001" in json.dumps(mine[0])
    history = instance.event_log_storage.get_asset_check_execution_history(
        AssetCheckKey(AssetKey(["ods", "order_item"]), "unit_price_in_range"), limit=1
    )
    assert history[0].partition == "2024-01-03"
    assert history[0].status == AssetCheckExecutionRecordStatus.FAILED


def test_a_weak_rule_that_cannot_run_blocks_no_publish(env, own_feed, spark, monkeypatch):
    """ods/orders' weak rule `amount_not_negative` made impossible to run (its aggregate a pattern Java's regex
    refuses, as one that slipped past the load check would be) shares the scan with the strong rules: the day is
    still published and recorded done for downstream, and only the weak rule fails."""
    import dataclasses

    from sharp_dagster.dqc.compiler import scan_query
    from sharp_dagster.dqc.quoting import quote_table
    from sharp_dagster.dqc.runner import RuleRunner

    compile_rules = RuleRunner._compile

    def with_a_broken_weak_rule(self, rules, view, ctx):
        plan = compile_rules(self, rules, view, ctx)
        broken = "count(CASE WHEN 'a' RLIKE '(?P<c>[a-z]+)' THEN 1 END)"
        aggregates = tuple((broken if a == "r_amount_not_negative" else e, a) for e, a in plan.aggregates)
        if aggregates == plan.aggregates:
            return plan
        return dataclasses.replace(
            plan, aggregates=aggregates, scan_sql=scan_query(list(aggregates), quote_table(plan.view))
        )

    monkeypatch.setattr(RuleRunner, "_compile", with_a_broken_weak_rule)
    defs, instance, jl = env
    own_feed.land("2024-01-01")
    result = run_day(defs, instance, "2024-01-01", keys=[["ods", "orders"]])
    assert result.success, "a weak rule never stops the pipeline"
    assert rows(spark, "ods.orders", "2024-01-01"), "the day was published"
    # What downstream waits on: the period's attempt recorded as a success in the job log.
    assert [r.status for r in jl.recent(limit=10) if r.job_name == "ods/orders"] == ["SUCCESS"]
    history = instance.event_log_storage.get_asset_check_execution_history(
        AssetCheckKey(AssetKey(["ods", "orders"]), "amount_not_negative"), limit=1
    )
    assert history[0].status == AssetCheckExecutionRecordStatus.FAILED
    has_rows = instance.event_log_storage.get_asset_check_execution_history(
        AssetCheckKey(AssetKey(["ods", "orders"]), "has_rows"), limit=1
    )
    assert has_rows[0].status == AssetCheckExecutionRecordStatus.SUCCEEDED
