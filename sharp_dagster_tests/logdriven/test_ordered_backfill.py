"""Ordered execution through Dagster: a range backfill stops at the first failure, a relaunch resumes there,
and the log-driven sensor launches only the earliest pending period per asset.

Each test builds its own state on a data folder and broker of its own (`own_feed`), so it passes alone and in any
order."""

from __future__ import annotations

from dagster import AssetKey, build_sensor_context, materialize

DAYS = ["2024-01-01", "2024-01-02", "2024-01-03", "2024-01-04", "2024-01-05"]
PRODUCT = AssetKey(["ods", "product"])


def env_of(feed):
    from sharp_dagster.logdriven import job_log

    return feed.defs, feed.instance, job_log()


def landed_and_done(feed, days):
    """Land `days` and run ods/product over them (one range run): the state a test builds on."""
    for day in days:
        feed.land(day)
    result = backfill(feed.defs, feed.instance, days[0], days[-1])
    assert result.success, "setting up: the product partitions of the landed days run"


def backfill(defs, instance, first, last, tags=None):
    """What a single-run Dagster backfill of a partition range launches: one run over the range."""
    return materialize(
        list(defs.assets),
        selection=[PRODUCT],
        instance=instance,
        resources=defs.resources,
        tags={
            "dagster/asset_partition_range_start": first,
            "dagster/asset_partition_range_end": last,
            **(tags or {}),
        },
        raise_on_error=False,
    )


def log_rows(jl, name="ods/product"):
    return sorted(
        (r.partition_key, r.attempt, r.status, r.job_start_time) for r in jl.recent(name, limit=100)
    )


def test_backfill_stops_at_failure_and_resumes(own_feed):
    feed = own_feed
    defs, instance, jl = env_of(feed)
    for day in DAYS[:2]:
        feed.land(day)
    # The injected failure: the binlog of day 3 has not landed (its done markers are missing).
    result = backfill(defs, instance, DAYS[0], DAYS[-1])
    assert not result.success
    rows = log_rows(jl)
    assert [(p, s) for p, _, s, _ in rows] == [
        ("2024-01-01", "SUCCESS"),
        ("2024-01-02", "SUCCESS"),
        ("2024-01-03", "FAILURE"),
    ], "partitions 4-5 never ran"
    assert instance.get_materialized_partitions(PRODUCT) == {"2024-01-01", "2024-01-02"}
    failure = next(e for e in result.all_events if e.is_step_failure)
    assert "the binlog of 2024-01-03 has not fully landed" in failure.step_failure_data.error.message

    # After the fix (days 3-5 landed), launching the same backfill again resumes at the failed partition, in order.
    for day in DAYS[2:]:
        feed.land(day)
    again = backfill(defs, instance, DAYS[0], DAYS[-1])
    assert again.success
    rows = log_rows(jl)
    assert [(p, a, s) for p, a, s, _ in rows] == [
        ("2024-01-01", 1, "SUCCESS"),
        ("2024-01-02", 1, "SUCCESS"),
        ("2024-01-03", 1, "FAILURE"),
        ("2024-01-03", 2, "SUCCESS"),
        ("2024-01-04", 1, "SUCCESS"),
        ("2024-01-05", 1, "SUCCESS"),
    ]
    second_run = [r for r in rows if r[1] == 2 or r[0] in ("2024-01-04", "2024-01-05")]
    starts = [r[3] for r in sorted(second_run, key=lambda r: r[0])]
    assert starts == sorted(starts), "3, 4, 5 ran in that order"
    assert instance.get_materialized_partitions(PRODUCT) == set(DAYS), "job log and Dagster agree"


def test_refresh_reruns_succeeded_partitions_in_order(own_feed):
    defs, instance, jl = env_of(own_feed)
    landed_and_done(own_feed, DAYS[:3])
    assert [(p, a, s) for p, a, s, _ in log_rows(jl)] == [(d, 1, "SUCCESS") for d in DAYS[:3]]
    result = backfill(defs, instance, DAYS[1], DAYS[2], tags={"sharp/refresh": "true"})
    assert result.success
    rows = log_rows(jl)
    assert [(p, a, s) for p, a, s, _ in rows] == [
        ("2024-01-01", 1, "SUCCESS"),
        ("2024-01-02", 1, "SUCCESS"),
        ("2024-01-02", 2, "SUCCESS"),
        ("2024-01-03", 1, "SUCCESS"),
        ("2024-01-03", 2, "SUCCESS"),
    ], "the refresh re-ran exactly the two succeeded partitions of its range"
    second = sorted((start, p) for p, a, _, start in rows if a == 2)
    assert [p for _, p in second] == ["2024-01-02", "2024-01-03"], "in partition order"


def test_sensor_launches_only_the_earliest_pending_period(own_feed):
    feed = own_feed
    defs, instance, _ = env_of(feed)
    landed_and_done(feed, DAYS[:2])
    sensor = defs.resolve_sensor_def("log_driven_sensor")
    from sharp_dagster.definitions import LOG_ASSETS
    from sharp_dagster.sensors.log_driven import plan_requests

    # ods/product is done through 2024-01-02; 2024-01-03 waits until its binlog has landed.
    _, waiting = plan_requests(LOG_ASSETS, set())
    assert any(w.startswith("ods/product 2024-01-03: waits for the binlog of 2024-01-03") for w in waiting), (
        waiting
    )
    feed.land("2024-01-03")
    result = sensor(build_sensor_context(instance=instance))
    requests = {key.to_user_string(): r for r in result.run_requests for key in r.asset_selection}
    # ods/product is done through 2024-01-02: its next period is 2024-01-03; the other ODS tables start at the
    # beginning, as ONE run of the shop's ODS multi-asset; DWD/ADS wait for their upstreams' periods.
    assert requests["ods/product"].partition_key == "2024-01-03"
    assert requests["ods/orders"].partition_key == "2024-01-01"
    assert "dwd/order_detail" not in requests and "ads/gmv_by_category" not in requests
    together = sorted(k.to_user_string() for k in requests["ods/orders"].asset_selection)
    assert together == ["ods/order_item", "ods/orders", "ods/user_info"], together
    assert requests["ods/orders"].run_key.startswith("ods_shop:2024-01-01:3 assets:")
    assert requests["ods/product"].run_key == "ods/product:2024-01-03:attempt-1"
