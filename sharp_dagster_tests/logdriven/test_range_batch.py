"""A range run of a SQL asset (a single-run backfill) goes as one batch: one write, one audit pass, one publish.

When the batch cannot publish (here a strong rule failing on the middle day), nothing of it reaches the table or
the job log, and the range runs one period at a time: the days before the bad one are published, the bad one is
FAILURE naming its rule, the later ones never run; a relaunch resumes at the bad day. A day whose SQL yields no
rows replaces its partition with nothing.

Each test builds its own state on a data folder and broker of its own (`own_feed`)."""

from __future__ import annotations

from dagster import AssetKey, materialize

from sharp_dagster.cdc.ods import store as ods_store
from sharp_dagster.cdc.ods.read import day_snapshots
from sharp_dagster.spark.tables import TableRef
from sharp_dagster_tests.cdc_support import change
from sharp_dagster_tests.logdriven.range_support import DAYS, DETAIL, NAME, ODS, range_run


def attempts(jl):
    return sorted((r.partition_key, r.attempt, r.status) for r in jl.recent(NAME, limit=100))


def published_snapshots(spark, table="dwd.order_detail"):
    """Snapshots of main's history that a run published (they carry its token), oldest first."""
    spark.catalog.refreshTable(table)
    rows = spark.sql(
        f"SELECT h.snapshot_id, s.summary FROM {table}.history h "
        f"JOIN {table}.snapshots s ON s.snapshot_id = h.snapshot_id "
        "WHERE h.is_current_ancestor ORDER BY h.made_current_at"
    ).collect()
    return [r.summary for r in rows if "sharp.token" in r.summary]


def rows_by_day(spark):
    spark.catalog.refreshTable("dwd.order_detail")
    return {
        r.dt: r.n for r in spark.sql("SELECT dt, count(*) AS n FROM dwd.order_detail GROUP BY dt").collect()
    }


def written_rows(jl, day):
    """The `write` step's row count of the day's latest attempt."""
    latest = max((r for r in jl.recent(NAME, limit=100) if r.partition_key == day), key=lambda r: r.attempt)
    return next(s.target_count for s in jl.steps(latest.job_id) if s.step_id == "write")


def named_attempts(store, jl, table="orders"):
    """Each of DAYS as its tag's snapshot names the attempt that wrote it (`sharp.*`): (partition, attempt) of
    that job id in the job log, the token, and the day."""
    attempt_of = {r.job_id: (r.partition_key, r.attempt) for r in jl.recent(f"ods/{table}", limit=100)}
    return {
        d["day"]: (
            attempt_of.get(d["properties"].get("job_id")),
            d["properties"].get("token"),
            d["properties"]["day"],
        )
        for d in day_snapshots(store, table)
        if d["day"] in DAYS
    }


def land_and_run_ods(feed, extra_by_day=None):
    for day in DAYS:
        feed.land(day, extra=(extra_by_day or {}).get(day))
    assert range_run(feed, ODS, DAYS[0], DAYS[-1]).success, "setting up: the ODS days"


def test_a_range_is_published_in_one_commit(own_feed, spark):
    from sharp_dagster.logdriven import job_log

    feed, jl = own_feed, job_log()
    land_and_run_ods(feed)
    result = range_run(feed, [DETAIL], DAYS[0], DAYS[-1])
    assert result.success
    assert attempts(jl) == [(d, 1, "SUCCESS") for d in DAYS]
    counts = rows_by_day(spark)
    assert set(counts) == set(DAYS) and all(counts.values())
    assert {d: written_rows(jl, d) for d in DAYS} == counts, "each period's row count is its partition's"
    snapshots = published_snapshots(spark)
    assert len(snapshots) == 1, "one snapshot on main for the whole range"
    assert snapshots[0]["sharp.partition"] == f"{DAYS[0]}..{DAYS[-1]}"
    assert snapshots[0]["sharp.attempt"] == "1,1,1"
    assert feed.instance.get_materialized_partitions(DETAIL) == set(DAYS)
    from sharp_dagster.spark.tables import TableRef

    tables = own_feed.defs.resources["spark"].store()
    assert tables.staged_branches(TableRef("dwd", "order_detail", ("dt",))) == {}, "no branch left"


def test_a_failing_day_falls_back_to_one_period_at_a_time_and_a_relaunch_resumes(own_feed, spark):
    from sharp_dagster.logdriven import job_log

    feed, jl = own_feed, job_log()
    when = "2024-01-02 12:00:00"
    order = dict(order_id=900001, user_id=1, order_time=when, total_amount=1.0, updated_at=when)
    item = dict(item_id=900001, order_id=900001, product_id=1, quantity=1)
    bad = [
        change("orders", "c", 10**6, when, order_status="paid", **order),
        change("order_item", "c", 10**6 + 1, when, unit_price=None, **item),  # line_amount NULL in DWD
    ]
    land_and_run_ods(feed, {"2024-01-02": bad})

    result = range_run(feed, [DETAIL], DAYS[0], DAYS[-1])
    assert not result.success
    assert attempts(jl) == [("2024-01-01", 1, "SUCCESS"), ("2024-01-02", 1, "FAILURE")], (
        "the batch left no attempt behind; the day after the bad one never ran"
    )
    failure = next(e for e in result.all_events if e.is_step_failure)
    message = failure.step_failure_data.error.message
    assert "dwd/order_detail [2024-01-02] not published" in message and "line_amount_not_null" in message
    said = [e.message for e in feed.instance.all_logs(result.run_id) if "as one batch" in (e.message or "")]
    assert said and "strong rule(s) failed: line_amount_not_null" in said[0], said
    assert set(rows_by_day(spark)) == {"2024-01-01"}, "main holds nothing of the batch beyond the first day"
    snapshots = published_snapshots(spark)
    assert [s["sharp.partition"] for s in snapshots] == ["2024-01-01"], "only the sequential publish of day 1"
    assert feed.instance.get_materialized_partitions(DETAIL) == {"2024-01-01"}

    # Fixed at the source and the ODS day re-run, the same backfill resumes at the bad day, as one batch.
    fix = change("order_item", "u", 10**6 + 2, "2024-01-02 13:00:00", unit_price=5.0, **item)
    feed.land("2024-01-02", extra=[fix], replay=False)
    refreshed = range_run(feed, [AssetKey(["ods", "order_item"])], "2024-01-02", "2024-01-02")
    assert refreshed.success
    again = range_run(feed, [DETAIL], DAYS[0], DAYS[-1])
    assert again.success
    assert attempts(jl) == [
        ("2024-01-01", 1, "SUCCESS"),
        ("2024-01-02", 1, "FAILURE"),
        ("2024-01-02", 2, "SUCCESS"),
        ("2024-01-03", 1, "SUCCESS"),
    ]
    assert [s["sharp.partition"] for s in published_snapshots(spark)] == [
        "2024-01-01",
        "2024-01-02..2024-01-03",
    ]
    assert set(rows_by_day(spark)) == set(DAYS)


def test_a_day_without_rows_replaces_its_partition_with_nothing(own_feed, spark):
    from sharp_dagster.logdriven import job_log

    feed, jl = own_feed, job_log()
    land_and_run_ods(feed)
    assert range_run(feed, [DETAIL], DAYS[0], DAYS[-1]).success
    # Every order placed on 2024-01-02 is deleted at the source late that day: the day's detail becomes empty.
    spark.catalog.refreshTable("ods.orders")
    placed = spark.sql(
        "SELECT * FROM ods.orders VERSION AS OF '2024-01-02' WHERE to_date(order_time) = DATE '2024-01-02'"
    ).collect()
    assert placed
    gone = [
        change(
            "orders",
            "d",
            10**6 + i,
            "2024-01-02 23:59:00",
            **{k: v for k, v in r.asDict().items() if k != "_binlog_seq"},
        )
        for i, r in enumerate(placed)
    ]
    feed.land("2024-01-02", extra=gone, replay=False)
    assert range_run(feed, [AssetKey(["ods", "orders"])], "2024-01-02", "2024-01-02").success
    refresh = range_run(feed, [DETAIL], DAYS[0], DAYS[-1], tags={"sharp/refresh": "true"})
    assert refresh.success
    counts = rows_by_day(spark)
    assert set(counts) == {"2024-01-01", "2024-01-03"}, "2024-01-02 was replaced by nothing"
    assert written_rows(jl, "2024-01-02") == 0
    assert [(d, a, s) for d, a, s in attempts(jl) if a == 2] == [(d, 2, "SUCCESS") for d in DAYS]
    assert published_snapshots(spark)[-1]["sharp.partition"] == f"{DAYS[0]}..{DAYS[-1]}"


def ods_days(spark, table):
    """Each published day of ODS table `table` (its tag) -> its rows then (the tombstones' with `ods_state`)."""
    store_rows = {}
    spark.catalog.refreshTable(f"ods.{table}")
    tags = spark.sql(f"SELECT name, snapshot_id FROM ods.{table}.refs WHERE type = 'TAG'").collect()
    for name in sorted(r.name for r in tags):
        store_rows[name] = {
            db: sorted(
                (tuple(r) for r in spark.sql(f"SELECT * FROM {db}.{table} VERSION AS OF '{name}'").collect()),
                key=repr,
            )
            for db in ("ods", "ods_state")
        }
    return store_rows


def step_of(jl, name, day, step_id, attempt=None):
    """A step of the day's latest attempt (or of `attempt`), None when that attempt has no such step."""
    runs = [r for r in jl.recent(name, limit=100) if r.partition_key == day]
    latest = attempt if attempt is not None else max(r.attempt for r in runs)
    run = next(r for r in runs if r.attempt == latest)
    return next((s for s in jl.steps(run.job_id) if s.step_id == step_id), None)


def step_output(jl, name, day, step_id, attempt=None):
    step = step_of(jl, name, day, step_id, attempt)
    return None if step is None else step.output or ""


def test_an_ods_range_stages_its_days_on_one_branch_and_a_rerun_republishes_the_later_days(own_feed, spark):
    """A range batch merges its days one after the other on one branch (each day's rules against its own
    snapshot), and one publish moves `main` and tags every day. Each day run again alone (a refresh), oldest
    first, re-publishes every later published day after it (the job log says so) and gives the same days."""
    from sharp_dagster.logdriven import job_log

    feed, jl = own_feed, job_log()
    land_and_run_ods(feed)
    assert sorted((r.partition_key, r.attempt, r.status) for r in jl.recent("ods/orders", limit=100)) == [
        (d, 1, "SUCCESS") for d in DAYS
    ]
    for day in DAYS:
        assert "(one branch for 3 days)" in step_output(jl, "ods/orders", day, "write")
        published = step_output(jl, "ods/orders", day, "publish")
        assert f"published ods.orders {DAYS[0]}..{DAYS[-1]} as snapshot" in published, published
        assert "(one commit of 3 partitions)" in published, published
        checks = step_output(jl, "ods/orders", day, "checks")
        assert "order_id_unique: pass" in checks, checks
    by_batch = ods_days(spark, "orders")
    assert set(DAYS) <= set(by_batch) and all(by_batch[d]["ods"] for d in DAYS)
    # The write step counts the day's live rows (from its snapshot's metadata) and the keys the day changed.
    for day in DAYS:
        write = step_of(jl, "ods/orders", day, "write")
        assert write.target_count == len(by_batch[day]["ods"]), (day, write.target_count)
        assert 0 < write.success_count <= write.target_count + len(by_batch[day]["ods_state"]), day
    store = feed.defs.resources["spark"].store()
    assert ods_store.ref_snapshot(store, TableRef("ods", "orders"), DAYS[-1]) == store.current_snapshot_id(
        TableRef("ods", "orders")
    ), "main is the last day"
    # Each day's commits name the attempt that merged it (`table history` shows them).
    assert named_attempts(store, jl) == {d: ((d, 1), "1", d) for d in DAYS}

    # Each day again alone, oldest first: day 1 re-publishes days 2 and 3, day 2 re-publishes day 3.
    for day in DAYS:
        alone = range_run(feed, [AssetKey(["ods", "orders"])], day, day, tags={"sharp/refresh": "true"})
        assert alone.success
        if day == DAYS[0]:
            # The later days it re-published name the re-run; Dagster: the later partitions materialized again
            # by day 1's run, with their checks.
            assert named_attempts(store, jl) == {d: ((DAYS[0], 2), "2", d) for d in DAYS}
            assert materialized(alone) == DAYS
            assert {c.partition for c in check_evaluations(alone, "status_known")} >= set(DAYS[1:])
    assert named_attempts(store, jl) == {d: ((d, 2), "2", d) for d in DAYS}
    later = step_output(jl, "ods/orders", DAYS[0], "read_later", attempt=2)
    assert f"while 2 later day(s) are published ({DAYS[1]}, {DAYS[2]})" in later, later
    published = step_output(jl, "ods/orders", DAYS[0], "publish", attempt=2)
    assert (
        f"published ods.orders {DAYS[0]} and re-published the later day(s) {DAYS[1]}, {DAYS[2]}" in published
    )
    audited = step_output(jl, "ods/orders", DAYS[0], "checks_later", attempt=2)
    assert f"audited the 2 later day(s) {DAYS[0]}'s run re-publishes ({DAYS[1]}, {DAYS[2]})" in audited, (
        audited
    )
    assert step_output(jl, "ods/orders", DAYS[2], "read_later", attempt=2) is None, (
        "nothing after the last day"
    )
    # The later days re-published by an earlier day's re-run keep their own SUCCESS attempts in the job log.
    assert sorted((r.partition_key, r.attempt, r.status) for r in jl.recent("ods/orders", limit=100)) == [
        (d, a, "SUCCESS") for d in DAYS for a in (1, 2)
    ]
    assert ods_days(spark, "orders") == by_batch, "the batch equals day-by-day merges"


def materialized(result):
    return sorted(
        e.step_materialization_data.materialization.partition
        for e in result.all_events
        if e.is_step_materialization
    )


def check_evaluations(result, check_name):
    return [
        e.event_specific_data
        for e in result.all_events
        if e.event_type_value == "ASSET_CHECK_EVALUATION" and e.event_specific_data.check_name == check_name
    ]


def test_a_range_longer_than_a_batch_goes_as_several_batches_in_order(own_feed, spark, monkeypatch):
    from sharp_dagster.publish import materialize

    monkeypatch.setattr(materialize, "BATCH_MAX_PERIODS", 2)
    land_and_run_ods(own_feed)
    assert range_run(own_feed, [DETAIL], DAYS[0], DAYS[-1]).success
    assert [s["sharp.partition"] for s in published_snapshots(spark)] == [f"{DAYS[0]}..{DAYS[1]}", DAYS[2]], (
        "a batch of two, then the last day alone"
    )
    assert set(rows_by_day(spark)) == set(DAYS)


def test_a_landing_backfill_of_many_hours_is_one_landing(own_feed, spark):
    """History already in the topic: a single-run backfill of every hour of three days lands it once (the job log
    holds one landing, labelled by its hours), marks every hour done, and the ODS range merges from it."""
    from sharp_dagster.demo.replay import replay_day
    from sharp_dagster.logdriven import job_log
    from sharp_dagster.settings import Settings

    feed, jl = own_feed, job_log()
    for day in DAYS:
        replay_day(
            Settings.from_env().sample_dir,
            day,
            feed.bootstrap,
            feed.topic,
            feed.source.source_id,
            feed.source.lateness_minutes,
        )
    landing = AssetKey(["original_binlog", feed.database])
    assert range_run(feed, [landing], f"{DAYS[0]}-00:00", f"{DAYS[-1]}-23:00").success
    runs = jl.recent(f"original_binlog/{feed.database}", limit=10)
    assert [(r.partition_key, r.status) for r in runs] == [(f"{DAYS[0]}-00:00..{DAYS[-1]}-23:00", "SUCCESS")]
    assert range_run(feed, ODS, DAYS[0], DAYS[-1]).success
    assert set(ods_days(spark, "orders")) >= set(DAYS)


def test_an_ods_range_that_fails_a_strong_rule_publishes_neither_table_past_the_bad_day(own_feed, spark):
    """The state staged beside the target is dropped with the batch: run one period at a time, day 1 is published
    (state and rows), day 2 is FAILURE naming its rule, and neither table holds day 2 or 3; no branch is left."""
    from sharp_dagster.logdriven import job_log
    from sharp_dagster.spark.tables import TableRef

    feed, jl = own_feed, job_log()
    when = "2024-01-02 12:00:00"
    bad = change(
        "orders", "c", 10**6, when, order_id=900001, user_id=1, order_time=when, total_amount=1.0,
        updated_at=when, order_status="lost_in_the_mail",
    )  # fmt: skip
    for day in DAYS:
        feed.land(day, extra=[bad] if day == DAYS[1] else None)
    result = range_run(feed, [AssetKey(["ods", "orders"])], DAYS[0], DAYS[-1])
    assert not result.success
    assert sorted((r.partition_key, r.attempt, r.status) for r in jl.recent("ods/orders", limit=100)) == [
        (DAYS[0], 1, "SUCCESS"),
        (DAYS[1], 1, "FAILURE"),
    ]
    said = [e.message for e in feed.instance.all_logs(result.run_id) if "as one batch" in (e.message or "")]
    assert said and "strong rule(s) failed: status_known" in said[0], said
    store = feed.defs.resources["spark"].store()
    for ref in (TableRef("ods", "orders"), TableRef("ods_state", "orders")):
        days = {
            r.name for r in spark.sql(f"SELECT name FROM {ref.qualified}.refs WHERE type = 'TAG'").collect()
        }
        assert DAYS[0] in days and not days & set(DAYS[1:]), (ref.qualified, days)
        assert store.staged_branches(ref) == {}, f"{ref.qualified}: no staging branch left"
    assert store.current_snapshot_id(TableRef("ods", "orders")) == ods_store.ref_snapshot(
        store, TableRef("ods", "orders"), DAYS[0]
    ), "main is day 1, published alone"
    published = step_output(jl, "ods/orders", DAYS[0], "publish")
    assert "one commit" not in published, published


# A strong rule bound to the day it audits: no big order is still 'created' after the day it was placed. It passes
# on the day an order is placed and fails on every later day until the order is paid.
SETTLED = {
    "asset": "ods/orders",
    "id": "big_orders_settled",
    "template": "custom_sql",
    "params": {
        "sql": "SELECT count(*) FROM ${table} WHERE order_status = 'created' AND total_amount >= 50000 "
        "AND order_time < to_date('${dt}')"
    },
    "comparator": "=",
    "expect": 0,
    "severity": "strong",
}


def with_orders_rule(feed, raw):
    """The project's assets, the shop's ODS multi-asset built by its own factory with one more rule of ods/orders."""
    from dagster import AssetsDefinition

    from sharp_dagster import definitions
    from sharp_dagster.assets.ods_source import build_ods_source_asset
    from sharp_dagster.dqc.rule_validation import build_rule
    from sharp_dagster.warehouse.cdc_layout import ods_tables

    database = next(t for t in ods_tables() if t.name == "orders").database
    rules = {
        **definitions.RULES,
        "ods/orders": [*definitions.RULES["ods/orders"], build_rule(raw, None, None)],
    }
    source = build_ods_source_asset(
        database,
        [t for t in ods_tables() if t.database == database],
        rules,
        definitions.GRAINS,
        definitions.LAYOUT.log_assets,
    )
    others = [a for a in feed.defs.assets if not (isinstance(a, AssetsDefinition) and a.keys & source.keys)]
    return [*others, source]


def test_a_rerun_publishes_nothing_when_a_later_days_rebuilt_state_fails_a_strong_rule(own_feed, spark):
    """A re-run of day 1 while days 2 and 3 are published audits each later day's re-built state with that day's
    own parameters before the one publish. A big order placed on day 1 and left 'created' passes day 1's rules
    but fails day 2's (bound to day 2's dt): nothing is published (every tag and `main` as they were), day 1's
    attempt is FAILURE naming day 2, the rule and its values, and its `checks_later` step says so. Paid on day 2 at
    the source, the same re-run publishes every day and records the audit of the later days."""
    from sharp_dagster.logdriven import job_log

    feed, jl = own_feed, job_log()
    orders = AssetKey(["ods", "orders"])
    assets = with_orders_rule(feed, SETTLED)
    for day in DAYS:
        feed.land(day)
    assert range_run(feed, [orders], DAYS[0], DAYS[-1]).success, "setting up: the ODS days"
    store = feed.defs.resources["spark"].store()
    refs = [TableRef("ods", "orders"), TableRef("ods_state", "orders")]

    def published():
        return {(r.qualified, n): ods_store.ref_snapshot(store, r, n) for r in refs for n in [*DAYS, "main"]}

    before = published()
    when = "2024-01-01 23:59:00"
    big = dict(order_id=900001, user_id=1, order_time=when, total_amount=99999.0, updated_at=when)
    feed.land(
        DAYS[0], extra=[change("orders", "c", 10**6, when, order_status="created", **big)], replay=False
    )

    def rerun(first, last):
        return materialize(
            assets, selection=[orders], instance=feed.instance, resources=feed.defs.resources,
            tags={"dagster/asset_partition_range_start": first, "dagster/asset_partition_range_end": last,
                  "sharp/refresh": "true"},
            raise_on_error=False,
        )  # fmt: skip

    blocked = rerun(DAYS[0], DAYS[0])
    assert not blocked.success
    message = next(e for e in blocked.all_events if e.is_step_failure).step_failure_data.error.message
    assert f"ods/orders [{DAYS[0]}] not published: the re-published later day {DAYS[1]}" in message, message
    assert "ods/orders:big_orders_settled FAIL: actual 1, expected = 0" in message, message
    assert published() == before, "every tag and main as they were"
    assert all(store.staged_branches(r) == {} for r in refs), "the branch is dropped"
    assert sorted((r.partition_key, r.attempt, r.status) for r in jl.recent("ods/orders", limit=100)) == [
        (DAYS[0], 1, "SUCCESS"), (DAYS[0], 2, "FAILURE"), (DAYS[1], 1, "SUCCESS"), (DAYS[2], 1, "SUCCESS"),
    ]  # fmt: skip
    audit = step_of(jl, "ods/orders", DAYS[0], "checks_later", attempt=2)
    assert audit.status == "FAILURE" and audit.failure_count >= 1, audit
    assert f"[{DAYS[1]}] [strong] big_orders_settled: fail" in audit.output, audit.output
    assert f"the re-published later day {DAYS[1]} failed strong rule(s) big_orders_settled" in audit.output
    assert f"not audited: {DAYS[2]}" in audit.output, audit.output
    assert step_of(jl, "ods/orders", DAYS[0], "publish", attempt=2) is None, "never got to the publish"
    assert not materialized(blocked) and not check_evaluations(blocked, "big_orders_settled"), (
        "Dagster is told nothing about the later partitions, whose published data did not change"
    )

    # Paid on day 2 at the source: a refresh of days 1 and 2 as one batch audits day 3, which it re-publishes with
    # them (the batch's last attempt says so), and publishes all three.
    paid = "2024-01-02 23:59:00"
    feed.land(
        DAYS[1], extra=[change("orders", "u", 10**6 + 1, paid, order_status="paid", **big)], replay=False
    )
    passed = rerun(DAYS[0], DAYS[1])
    assert passed.success
    assert step_output(jl, "ods/orders", DAYS[1], "write", attempt=2).count("(one branch for 2 days)") == 1
    audit = step_of(jl, "ods/orders", DAYS[1], "checks_later", attempt=2)
    assert audit.status == "SUCCESS", audit
    assert f"audited the 1 later day(s) {DAYS[1]}'s run re-publishes ({DAYS[2]})" in audit.output, (
        audit.output
    )
    assert "6 rule(s) each (4 strong), every strong rule passed" in audit.output, audit.output
    assert f"[{DAYS[2]}] [strong] big_orders_settled: pass" in audit.output, audit.output
    after = published()
    assert all(after[("ods.orders", d)] != before[("ods.orders", d)] for d in DAYS), "every day re-published"
    spark.catalog.refreshTable("ods.orders")
    status = spark.sql(
        f"SELECT order_status FROM ods.orders VERSION AS OF '{DAYS[1]}' WHERE order_id = 900001"
    )
    assert [r.order_status for r in status.collect()] == ["paid"]
    # Dagster: day 3 materialized again by this run, with its own check evaluations.
    assert materialized(passed) == DAYS
    checks = [(c.partition, c.passed) for c in check_evaluations(passed, "big_orders_settled")]
    assert (DAYS[2], True) in checks, checks
