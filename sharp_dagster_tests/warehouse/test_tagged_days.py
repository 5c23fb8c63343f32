"""Reading ODS days as tags (issue 33) on real Iceberg tables built by the engine: the project's DWD SQL over a
tagged day equals the same DWD over the `dt` partitions the old layout published (the chain of `merge_day`
results); the run's read check counts a tag's rows from the metadata and names a day with no tag; the IO manager
loads ODS partitions as their tags. One warehouse for the module (one Spark session, few commits)."""

from __future__ import annotations

import pytest
from dagster import AssetKey, PartitionKeyRange, build_input_context
from pyspark.sql import functions as F

from sharp_dagster.assets.sql_assets import require_upstream
from sharp_dagster.cdc.merge.fold import published
from sharp_dagster.cdc.ods.read import day_counts, read_days, require_days
from sharp_dagster.partitions import partitions_for
from sharp_dagster.periods import period_of_key
from sharp_dagster.resources.io_manager import SparkTableIOManager
from sharp_dagster.resources.spark import SparkResource
from sharp_dagster.spark.tables import MissingPartitionError, TableRef
from sharp_dagster.warehouse.catalog import load_catalog
from sharp_dagster.warehouse.variables import render, window_variables
from sharp_dagster_tests.conftest import fresh_tables
from sharp_dagster_tests.ods_days_support import (
    BOOT,
    DAY1,
    DAY2,
    items,
    products,
    publish_once,
    publish_orders,
)

# dwd/order_detail.sql as it read the `dt`-partitioned ODS layout before issue 33 (the tables here in `ods_dt`).
DT_LAYOUT_SQL = """
SELECT i.item_id, o.order_id, o.user_id, o.order_status, o.order_time, i.product_id, p.product_name,
    COALESCE(p.category, 'unknown') AS category, i.quantity, i.unit_price,
    CAST(i.quantity * i.unit_price AS DECIMAL(14, 2)) AS line_amount, o.order_status = 'cancelled' AS is_cancelled
FROM ods_dt.orders AS o
JOIN ods_dt.order_item AS i ON i.order_id = o.order_id AND i.dt = '${dt}'
LEFT JOIN ods_dt.product AS p ON p.product_id = i.product_id AND p.dt = '${dt}'
WHERE o.dt = '${dt}'
  AND o.order_time >= TIMESTAMP '${DATA_RANGE_START}'
  AND o.order_time < TIMESTAMP '${DATA_RANGE_END}'
"""


@pytest.fixture(scope="module")
def tagged(spark, tmp_path_factory):
    """`ods.orders` (tags BOOT, DAY1, DAY2), `ods.order_item` and `ods.product` (tag DAY1), and the same DAY1 as
    `dt` partitions of `ods_dt.*`; the settings point at this warehouse (the IO manager's store is the same)."""
    folder = tmp_path_factory.mktemp("tagged_days")
    mp = pytest.MonkeyPatch()
    mp.setenv("SHARP_WAREHOUSE_DIR", str(folder / "warehouse"))
    mp.setenv("SHARP_LOG_DB_URL", f"sqlite:///{folder / 'sharp_log.db'}")
    store = fresh_tables(spark, folder)
    chain = publish_orders(store, [DAY1, DAY2])
    states = {"orders": chain[DAY1], "order_item": items(spark), "product": products(spark)}
    for name in ("order_item", "product"):
        publish_once(store, name, DAY1, states[name])
    for name, state in states.items():
        rows = published(state).withColumn("dt", F.lit(DAY1))
        store.write_partition(TableRef("ods_dt", name), {"dt": DAY1}, rows)
    yield store, chain
    mp.undo()


def _rows(df) -> list[tuple]:
    return sorted((tuple(r) for r in df.collect()), key=lambda t: tuple(str(v) for v in t))


def test_dwd_of_a_tagged_day_equals_dwd_of_the_dt_partition(spark, tagged):
    detail = load_catalog().get("dwd/order_detail")
    sql = detail.render(DAY1)
    from_tags = _rows(spark.sql(sql))
    from_partitions = _rows(spark.sql(render(DT_LAYOUT_SQL, window_variables(DAY1, "daily"))))
    assert from_tags == from_partitions
    by_item = {r[0]: r for r in from_tags}
    assert sorted(by_item) == [100, 102, 103, 104]  # order 2 was deleted on DAY1; order 4 is of another day
    assert by_item[100][3] == "cancelled" and by_item[100][-1] is True  # DAY1's partial image
    assert by_item[103][3] == "paid"  # as on DAY1, though DAY2 shipped it
    assert by_item[104][7] == "unknown"  # no such product
    # Without the clause the same SQL reads the latest state (DAY2's), which is not the partition's day.
    latest = _rows(spark.sql(sql.replace(f" VERSION AS OF '{DAY1}'", "")))
    assert {r[0]: r[3] for r in latest}[103] == "shipped" and latest != from_tags


def test_the_read_check_counts_tags_from_metadata_and_names_a_missing_day(spark, tagged):
    store, chain = tagged
    counts = day_counts(store, "orders")
    assert sorted(counts) == [BOOT, DAY1, DAY2]
    for day, state in chain.items():
        scanned = spark.sql(f"SELECT count(*) FROM ods.orders VERSION AS OF '{day}'").first()[0]
        assert counts[day] == scanned == state.where("NOT _is_deleted").count(), day
    assert require_days(store, "orders", [DAY1, DAY2]) == counts[DAY1] + counts[DAY2]

    table = load_catalog().get("dwd/order_detail")
    # A run hands require_upstream the upstream periods it reads.
    day1, day2 = period_of_key(DAY1, "daily"), period_of_key(DAY2, "daily")
    assert require_upstream(store, table, "ods.order_item", [day1], {}, "dwd/order_detail[2024-01-02]") == 5
    with pytest.raises(MissingPartitionError) as err:
        require_upstream(store, table, "ods.order_item", [day2], {}, "dwd/order_detail[2024-01-03]")
    assert (
        "upstream day not published needed by dwd/order_detail[2024-01-03]: ods.order_item[tag 2024-01-03]"
        in (str(err.value))
    )
    # Within a range run the tags are read once: a day published meanwhile is not seen (the gate ordered them).
    with store.counts_read_once():
        assert require_days(store, "product", [DAY1]) == 3
        store.spark.sql("DELETE FROM ods.product WHERE product_id = 3")
        assert day_counts(store, "product") == {DAY1: 3}
    assert day_counts(store, "product") == {DAY1: 3}  # a write to main is no day: the tag still holds 3 rows


def test_the_io_manager_loads_ods_partitions_as_their_tags(tagged):
    _, chain = tagged
    manager = SparkTableIOManager(spark=SparkResource())
    context = build_input_context(
        asset_key=AssetKey(["ods", "orders"]),
        asset_partitions_def=partitions_for("daily", BOOT),
        asset_partition_key_range=PartitionKeyRange(DAY1, DAY2),
    )
    loaded = manager.load_input(context)
    per_day = {r.dt: r.n for r in loaded.groupBy("dt").agg(F.count("*").alias("n")).collect()}
    assert per_day == {d: chain[d].where("NOT _is_deleted").count() for d in (DAY1, DAY2)}
    missing = build_input_context(
        asset_key=AssetKey(["ods", "order_item"]),
        asset_partitions_def=partitions_for("daily", BOOT),
        asset_partition_key_range=PartitionKeyRange(DAY1, DAY2),
    )
    with pytest.raises(MissingPartitionError, match=r"ods\.order_item\[tag 2024-01-03\]"):
        manager.load_input(missing)
    assert read_days(tagged[0], "order_item", []).count() == 0
