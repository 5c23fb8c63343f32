"""The upstream gate (issue 15): a partition refuses to run while an upstream period it reads is not SUCCESS in
the job log (FAILURE, RUNNING, never run), same grain or not, lookbacks included, in every launch path.

The planner tests drive the decision (`planner.require_upstreams_done`) over a real job-log database; the Dagster
tests make an upstream really fail (a strong rule on bad binlog data), show the downstream refused before anything
is written (direct materialization and the `log rerun` path), then run it once the upstream is repaired.
"""

from __future__ import annotations

import io
from dataclasses import replace
from datetime import datetime

import pytest
from dagster import AssetKey, materialize

from sharp_dagster.joblog import FAILURE, RUNNING, SUCCESS
from sharp_dagster.joblog.planner import (
    UpstreamNotDone,
    UpstreamRead,
    require_upstreams_done,
)
from sharp_dagster.joblog.store import JobLog
from sharp_dagster.periods import PeriodSpec
from sharp_dagster_tests.cdc_support import change

DAY = "2024-01-01"
ODS = [["ods", "orders"], ["ods", "order_item"], ["ods", "product"]]
DETAIL = [["dwd", "order_detail"]]
DAILY = PeriodSpec("daily", datetime(2024, 1, 1))
HOURLY = PeriodSpec("hourly", datetime(2024, 1, 1))


# ---------------------------------------------------------------------- the decision, over a real job log


@pytest.fixture()
def jl(tmp_path):
    return JobLog(f"sqlite:///{tmp_path / 'joblog.db'}")


def _attempt(jl: JobLog, name: str, spec: PeriodSpec, key: str, status: str):
    """One real attempt through the JobLog API; RUNNING leaves it claimed (its handle is returned)."""
    handle = jl.claim(name, spec.period_for_key(key), run_id=f"{status.lower()}-{key}")
    if status != RUNNING:
        jl.finish(handle, status, None if status == SUCCESS else "boom")
    return handle


def _refusal(jl: JobLog, key: str, upstreams: dict[str, UpstreamRead]) -> str:
    with pytest.raises(UpstreamNotDone) as err:
        require_upstreams_done(jl, "dwd/t", DAILY.period_for_key(key), upstreams)
    return str(err.value)


def test_same_grain_upstream_latest_attempt_decides(jl):
    ups = {"ods/a": UpstreamRead(DAILY), "ods/b": UpstreamRead(DAILY)}
    # Never run: refused, naming both upstream partitions.
    text = _refusal(jl, "2024-01-03", ups)
    assert "dwd/t [2024-01-03] refused" in text
    assert "ods/a [2024-01-03]: never run" in text and "ods/b [2024-01-03]: never run" in text

    _attempt(jl, "ods/a", DAILY, "2024-01-03", SUCCESS)
    _attempt(jl, "ods/b", DAILY, "2024-01-03", SUCCESS)
    assert all(c.ok for c in require_upstreams_done(jl, "dwd/t", DAILY.period_for_key("2024-01-03"), ups))

    # A later attempt of a SUCCESS period counts, not the earlier success: running again, then failed.
    running = _attempt(jl, "ods/a", DAILY, "2024-01-03", RUNNING)
    text = _refusal(jl, "2024-01-03", ups)
    assert "ods/a [2024-01-03]: RUNNING (run running-" in text and "ods/b" not in text, text
    jl.finish(running, FAILURE, "boom")
    text = _refusal(jl, "2024-01-03", ups)
    assert "ods/a [2024-01-03]: FAILURE (run " in text, text
    _attempt(jl, "ods/a", DAILY, "2024-01-03", SUCCESS)
    assert all(c.ok for c in require_upstreams_done(jl, "dwd/t", DAILY.period_for_key("2024-01-03"), ups))


def test_lookback_and_other_grain_periods_are_gated(jl):
    for key in ("2024-01-02", "2024-01-03", "2024-01-04", "2024-01-05"):
        _attempt(jl, "ods/a", DAILY, key, SUCCESS)
    _attempt(jl, "ods/a", DAILY, "2024-01-03", FAILURE)  # a re-run of a looked-back day failed
    target = "2024-01-05"
    text = _refusal(jl, target, {"ods/a": UpstreamRead(DAILY, lookback=2)})
    assert text.endswith("upstream not SUCCESS in the job log: ods/a [2024-01-03]: FAILURE (run failure-)"), (
        text
    )
    # A lookback of 1 does not reach 2024-01-03: the partition may run.
    checks = require_upstreams_done(
        jl, "dwd/t", DAILY.period_for_key(target), {"ods/a": UpstreamRead(DAILY, 1)}
    )
    assert [c.expected for c in checks] == [2]
    # A lookback reaching before the upstream's first period cannot be met, and says so.
    assert "ods/a [2023-12-31]: outside the upstream's range" in _refusal(
        jl, "2024-01-02", {"ods/a": UpstreamRead(DAILY, lookback=2)}
    )

    # An hourly upstream of a daily table: its 24 hours, each by its latest attempt.
    for hour in range(24):
        _attempt(jl, "raw/h", HOURLY, f"2024-01-05-{hour:02d}:00", SUCCESS)
    _attempt(jl, "raw/h", HOURLY, "2024-01-05-13:00", RUNNING)
    text = _refusal(jl, target, {"raw/h": UpstreamRead(HOURLY)})
    assert "raw/h [2024-01-05-13:00]: RUNNING" in text and "12:00" not in text
    with pytest.raises(ValueError, match="lookback"):
        UpstreamRead(DAILY, lookback=-1)


def test_every_log_driven_upstream_is_gated_with_its_lookback():
    """The job-log view of a SQL table gates all its log-driven upstreams (not only those of another grain)."""
    from sharp_dagster.warehouse.layout import layout

    detail = layout().log_assets["dwd/order_detail"]
    assert {k: v.lookback for k, v in detail.upstream.items()} == {
        "ods/orders": 0,
        "ods/order_item": 0,
        "ods/product": 0,
    }
    base = layout().catalog.by_qualified()["dwd.order_detail"]
    table = replace(base, name="order_detail_lb", lookback={"ods.orders": 6})
    gated = layout().sql_log_asset(table, ["ods.orders", "ods.order_item", "ods.product"]).upstream
    assert gated["ods/orders"].lookback == 6 and gated["ods/orders"].spec.grain == "daily"
    window = gated["ods/orders"].window(DAILY.period_for_key("2024-01-10"))
    assert window == (datetime(2024, 1, 4), datetime(2024, 1, 11))


# ---------------------------------------------------------------------- real runs in Dagster


def _run(feed, keys, day=DAY):
    return materialize(
        list(feed.defs.assets),
        selection=[AssetKey(k) for k in keys],
        partition_key=day,
        instance=feed.instance,
        resources=feed.defs.resources,
        raise_on_error=False,
    )


def _failure(result) -> str:
    return next(e for e in result.all_events if e.is_step_failure).step_failure_data.error.message


def _rows(spark, table, day=DAY):
    """The published rows of `day`: an ODS table's tag (`VERSION AS OF '<day>'`), another table's partition."""
    spark.catalog.refreshTable(table)
    if table.startswith("ods."):
        return sorted(tuple(r) for r in spark.sql(f"SELECT * FROM {table} VERSION AS OF '{day}'").collect())
    return sorted(tuple(r) for r in spark.table(table).where(f"dt = '{day}'").collect())


def _fail_orders(feed, spark, jl):
    """ods/orders [DAY] re-run on bad data: its strong rule fails, its previous rows stay, job log FAILURE."""
    feed.land(DAY)
    assert _run(feed, ODS).success
    good = _rows(spark, "ods.orders")
    order = good[0]
    row = {
        "order_id": order[0],
        "user_id": order[1],
        "order_time": f"{DAY} 10:00:00",
        "total_amount": 1.0,
        "updated_at": f"{DAY} 23:00:00",
    }
    bad = change("orders", "u", 10**6, f"{DAY} 23:00:00", order_status="lost", **row)
    feed.land(DAY, extra=[bad], replay=False)
    failed = _run(feed, [["ods", "orders"]])
    assert not failed.success and "status_known" in _failure(failed)
    assert _latest(jl, "ods/orders").status == FAILURE
    assert _rows(spark, "ods.orders") == good, "the failed run kept the previous rows"
    return row


def _repair_orders(feed, row, jl):
    fixed = change("orders", "u", 10**6 + 1, f"{DAY} 23:30:00", order_status="paid", **row)
    feed.land(DAY, extra=[fixed], replay=False)
    assert _run(feed, [["ods", "orders"]]).success
    assert _latest(jl, "ods/orders").status == SUCCESS


def _latest(jl, name, day=DAY):
    return max((r for r in jl.recent(name, limit=100) if r.partition_key == day), key=lambda r: r.attempt)


def _detail_partition(feed) -> bool:
    from sharp_dagster.resources.io_manager import table_ref_for

    store = feed.defs.resources["spark"].store()
    return store.has_partition(table_ref_for(["dwd", "order_detail"], "daily"), {"dt": DAY})


def test_direct_materialization_refuses_a_failed_upstream_then_runs(own_feed, spark):
    from sharp_dagster.logdriven import job_log

    jl = job_log()
    row = _fail_orders(own_feed, spark, jl)

    refused = _run(own_feed, DETAIL)
    assert not refused.success
    message = _failure(refused)
    assert (
        "dwd/order_detail [2024-01-01] refused" in message and "ods/orders [2024-01-01]: FAILURE" in message
    )
    assert "ods/order_item" not in message and "ods/product" not in message, message
    # Nothing was written; the job log records the refusal as the downstream's FAILURE, with the reason, and
    # shows that the run stopped at the gate (no read, no write step).
    assert not _detail_partition(own_feed)
    attempt = _latest(jl, "dwd/order_detail")
    assert (attempt.attempt, attempt.status) == (1, FAILURE)
    assert "ods/orders [2024-01-01]: FAILURE" in attempt.error
    steps = {s.step_id: s.status for s in jl.steps(attempt.job_id)}
    assert steps.get("checkdone") == FAILURE and "read" not in steps and "write" not in steps, steps

    # The upstream repaired (a later change at the source), the downstream runs and publishes.
    _repair_orders(own_feed, row, jl)
    ran = _run(own_feed, DETAIL)
    assert ran.success
    attempt = _latest(jl, "dwd/order_detail")
    assert (attempt.attempt, attempt.status) == (2, SUCCESS)
    assert _detail_partition(own_feed) and spark.table("dwd.order_detail").where(f"dt = '{DAY}'").count() > 0


def test_cli_rerun_refuses_running_failed_and_never_run_upstreams(own_feed, spark, tmp_path, monkeypatch):
    from sharp_dagster.cli.rerun import rerun_periods
    from sharp_dagster.joblog.planner import refresh_periods
    from sharp_dagster.logdriven import job_log
    from sharp_dagster.warehouse.layout import layout

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    jl = job_log()
    row = _fail_orders(own_feed, spark, jl)
    detail = "dwd/order_detail"
    spec = layout().log_assets[detail].spec

    # The latest attempt of ods/orders [DAY] is FAILURE: `log rerun` of the downstream is refused.
    report = io.StringIO()
    assert rerun_periods(detail, refresh_periods(spec, DAY, DAY), out=report) == 1
    assert "ods/orders [2024-01-01]: FAILURE" in report.getvalue(), report.getvalue()
    assert not _detail_partition(own_feed)

    # Repaired, then another attempt of ods/product [DAY] is RUNNING (e.g. someone re-runs it right now).
    _repair_orders(own_feed, row, jl)
    holder = jl.claim("ods/product", spec.period_for_key(DAY), run_id="someone-else")
    report = io.StringIO()
    assert rerun_periods(detail, refresh_periods(spec, DAY, DAY), out=report) == 1
    assert "ods/product [2024-01-01]: RUNNING (run someone-" in report.getvalue(), report.getvalue()
    assert not _detail_partition(own_feed)
    jl.finish(holder, SUCCESS)

    # Now DAY runs; the next day's upstreams never ran: refused there, in order, and the job log says why.
    report = io.StringIO()
    assert rerun_periods(detail, refresh_periods(spec, DAY, "2024-01-02"), out=report) == 1
    text = report.getvalue()
    assert "[1/2]" in text and "ok in" in text, text
    assert "ods/orders [2024-01-02]: never run" in text, text
    assert _detail_partition(own_feed)
    statuses = sorted((r.partition_key, r.attempt, r.status) for r in jl.recent(detail, limit=20))
    assert statuses == [
        ("2024-01-01", 1, FAILURE),
        ("2024-01-01", 2, FAILURE),
        ("2024-01-01", 3, SUCCESS),
        ("2024-01-02", 1, FAILURE),
    ]
