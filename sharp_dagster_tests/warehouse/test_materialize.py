"""The warehouse through Dagster: correct ODS state, exact-partition re-materialization, missing upstream data."""

from __future__ import annotations

import json

import pytest
from dagster import AssetKey, DagsterInstance, materialize

from sharp_dagster.cdc.ods.store import published_days
from sharp_dagster.demo.generator import GeneratorConfig, generate, read_changes
from sharp_dagster.settings import Settings
from sharp_dagster.spark.iceberg import warehouse_tables
from sharp_dagster_tests.cdc_support import CdcFeed, local_broker

CFG = GeneratorConfig(days=3, users=60, products=12, orders_per_day=30, history_orders=25)


@pytest.fixture(scope="module")
def warehouse(spark):
    """Two days of every asset, fed through the binlog path (broker, landing, merge) and the project's job."""
    from sharp_dagster.definitions import defs

    settings = Settings.from_env()
    generate(settings.sample_dir, CFG, force=True)
    instance = DagsterInstance.ephemeral()
    with local_broker():
        feed = CdcFeed(defs, instance)
        job = defs.resolve_job_def("warehouse_daily")
        for day in ("2024-01-01", "2024-01-02"):
            feed.land(day)
            assert job.execute_in_process(partition_key=day, instance=instance).success
        yield defs, instance


def tagged_store(spark):
    return warehouse_tables(spark, Settings.from_env())


def table_rows(spark, table, dt):
    df = spark.table(table).where(f"dt = '{dt}'")
    return sorted(tuple(r) for r in df.collect())


def expected_orders(day_keys):
    """Replay the generated changes over the snapshot in Python: the oracle for ods.orders."""
    root = Settings.from_env().sample_dir
    state = {}
    for line in (root / "shop" / "snapshot" / "orders" / "orders.jsonl").read_text().splitlines():
        row = json.loads(line)
        state[row["order_id"]] = row["order_status"]
    for day in day_keys:
        for change in read_changes(root, day):
            if change["_table"] != "orders":
                continue
            if change["_op"] == "d":
                state.pop(change["order_id"])
            else:
                state[change["order_id"]] = change["order_status"]
    return sorted(state.items())


def test_ods_equals_replayed_source(spark, warehouse):
    day = spark.sql("SELECT order_id, order_status FROM ods.orders VERSION AS OF '2024-01-02'").collect()
    assert sorted((r.order_id, r.order_status) for r in day) == expected_orders(["2024-01-01", "2024-01-02"])
    day1 = spark.sql("SELECT order_id, order_status FROM ods.orders VERSION AS OF '2024-01-01'").collect()
    assert sorted((r.order_id, r.order_status) for r in day1) == expected_orders(["2024-01-01"])


def test_every_asset_has_metadata(warehouse):
    defs, instance = warehouse
    from dagster import AssetKey

    for key in (["dwd", "order_detail"], ["ads", "gmv_by_category"], ["ods", "user_info"]):
        event = instance.get_latest_materialization_event(AssetKey(key))
        meta = event.asset_materialization.metadata
        assert meta["dagster/row_count"].value > 0
        assert [c.name for c in meta["dagster/column_schema"].schema.columns]
        assert event.asset_materialization.partition == "2024-01-02"


def test_rematerializing_one_partition_leaves_the_others(spark, warehouse):
    defs, instance = warehouse
    before_day1 = table_rows(spark, "dwd.order_detail", "2024-01-01")
    before_day2 = table_rows(spark, "dwd.order_detail", "2024-01-02")
    assert before_day1 and before_day2
    job = defs.resolve_job_def("warehouse_daily")
    assert job.execute_in_process(partition_key="2024-01-02", instance=instance).success
    assert table_rows(spark, "dwd.order_detail", "2024-01-01") == before_day1
    assert table_rows(spark, "dwd.order_detail", "2024-01-02") == before_day2
    gmv = {r.category: r.gmv for r in spark.table("ads.gmv_by_category").where("dt = '2024-01-02'").collect()}
    detail = spark.sql(
        "SELECT category, SUM(line_amount) AS s FROM dwd.order_detail "
        "WHERE dt = '2024-01-02' AND NOT is_cancelled GROUP BY category"
    ).collect()
    assert gmv == {r.category: r.s for r in detail}


def test_missing_upstream_partition_fails_by_name(spark, warehouse):
    defs, instance = warehouse
    # Definitions by their keys (a multi-asset has no single `.key`).
    assets = [a for a in defs.assets if getattr(a, "keys", None)]
    order_detail = next(a for a in assets if AssetKey(["dwd", "order_detail"]) in a.keys)
    result = materialize(
        [order_detail, *[a for a in assets if any(k.path[0] == "ods" for k in a.keys)]],
        selection=[order_detail.key],
        partition_key="2024-01-03",
        instance=instance,
        resources=defs.resources,
        raise_on_error=False,
    )
    assert not result.success
    failure = next(e for e in result.all_events if e.is_step_failure)
    message = failure.step_failure_data.error.message + "".join(
        c.message for c in (failure.step_failure_data.error.cause,) if c
    )
    # The upstream gate refuses first (issue 15), naming the never-run upstream partitions; nothing is read.
    assert "ods/orders [2024-01-03]: never run" in message
    assert "ods/order_item [2024-01-03]: never run" in message
    assert spark.table("dwd.order_detail").where("dt = '2024-01-03'").count() == 0


def test_out_of_order_partition_names_the_earliest_pending(spark, warehouse):
    defs, instance = warehouse
    job = defs.resolve_job_def("warehouse_daily")
    result = job.execute_in_process(partition_key="2024-01-09", instance=instance, raise_on_error=False)
    assert not result.success
    failure = next(e for e in result.all_events if e.is_step_failure)
    assert (
        "cannot run before the earlier partition 2024-01-03 (never run)"
        in failure.step_failure_data.error.message
    )
    assert "2024-01-09" not in published_days(tagged_store(spark), "orders")


def test_day_not_landed_is_not_merged(spark, warehouse):
    defs, instance = warehouse
    key = AssetKey(["ods", "orders"])
    orders = next(a for a in defs.assets if key in (getattr(a, "keys", None) or ()))
    result = materialize(
        [orders],
        selection=[key],
        partition_key="2024-01-03",
        instance=instance,
        resources=defs.resources,
        raise_on_error=False,
    )
    assert not result.success
    message = next(e for e in result.all_events if e.is_step_failure).step_failure_data.error.message
    assert "the binlog of 2024-01-03 has not fully landed" in message and "not merged" in message
    assert "2024-01-03" not in published_days(tagged_store(spark), "orders")
