"""Small ODS tables in the current-state layout (issue 33), built with the engine the ODS asset uses
(`ods_merge.write_state` for a first day, `stage_days` + `publish` for the days after), and the same days as the
chain of `merge_day` results: what the read-side tests (DWD SQL, the read check, rollback to a day) start from.

The shop's three tables `order_detail.sql` reads, a few rows each: `orders` changes on two days (an update by a
partial image, a delete, inserts), `order_item` and `product` are published once.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from sharp_dagster.cdc.merge.fold import merge_day
from sharp_dagster.cdc.ods import merge as ods_merge
from sharp_dagster_tests.cdc.merge_reference import change, changes_frame, state_frame

BOOT, DAY1, DAY2 = "2024-01-01", "2024-01-02", "2024-01-03"

ORDERS = [
    ("order_id", "bigint"),
    ("user_id", "bigint"),
    ("order_status", "string"),
    ("order_time", "timestamp"),
]
ITEMS = [
    ("item_id", "bigint"),
    ("order_id", "bigint"),
    ("product_id", "bigint"),
    ("quantity", "int"),
    ("unit_price", "decimal(12,2)"),
]
PRODUCTS = [("product_id", "bigint"), ("product_name", "string"), ("category", "string")]
KEYS = {"orders": ["order_id"], "order_item": ["item_id"], "product": ["product_id"]}


def _seq(rows: list[dict]) -> list[dict]:
    return [{**r, "_binlog_seq": 0, "_is_deleted": False} for r in rows]


def _at(day: str, hour: int) -> datetime:
    return datetime.fromisoformat(f"{day} {hour:02d}:00:00")


def base_orders(spark):
    rows = [
        {"order_id": 1, "user_id": 10, "order_status": "paid", "order_time": _at(DAY1, 8)},
        {"order_id": 2, "user_id": 11, "order_status": "paid", "order_time": _at(DAY1, 9)},
        {"order_id": 3, "user_id": 12, "order_status": "created", "order_time": _at(DAY1, 10)},
        {"order_id": 4, "user_id": 13, "order_status": "paid", "order_time": _at(BOOT, 23)},
    ]
    return state_frame(spark, _seq(rows), ORDERS)


def _order_change(op: str, pos: int, after: dict | None = None, before: dict | None = None) -> dict:
    row = change(op, pos, after=after, before=before, table="orders")
    return {**row, "pk_names": ["order_id"]}


def order_changes(spark) -> dict:
    """Day 1: order 1 cancelled (a partial image), order 2 deleted, order 5 placed. Day 2: order 5 shipped,
    order 3 paid, order 6 placed."""
    day1 = [
        _order_change("u", 10, after={"order_id": 1, "order_status": "cancelled"}),
        _order_change("d", 11, before={"order_id": 2}),
        _order_change(
            "c",
            12,
            after={"order_id": 5, "user_id": 10, "order_status": "paid", "order_time": f"{DAY1} 12:00:00"},
        ),
    ]
    day2 = [
        _order_change("u", 20, after={"order_id": 5, "order_status": "shipped"}),
        _order_change("u", 21, after={"order_id": 3, "order_status": "paid"}),
        _order_change(
            "c",
            22,
            after={"order_id": 6, "user_id": 14, "order_status": "paid", "order_time": f"{DAY2} 07:00:00"},
        ),
    ]
    return {DAY1: changes_frame(spark, day1), DAY2: changes_frame(spark, day2)}


def items(spark):
    rows = [
        {"item_id": 100, "order_id": 1, "product_id": 1, "quantity": 2, "unit_price": Decimal("3.00")},
        {"item_id": 101, "order_id": 2, "product_id": 2, "quantity": 1, "unit_price": Decimal("10.00")},
        {"item_id": 102, "order_id": 3, "product_id": 3, "quantity": 4, "unit_price": Decimal("2.00")},
        {"item_id": 103, "order_id": 5, "product_id": 1, "quantity": 1, "unit_price": Decimal("3.00")},
        {"item_id": 104, "order_id": 5, "product_id": 9, "quantity": 5, "unit_price": Decimal("1.50")},
    ]
    return state_frame(spark, _seq(rows), ITEMS)


def products(spark):
    rows = [
        {"product_id": 1, "product_name": "pen", "category": "office"},
        {"product_id": 2, "product_name": "mug", "category": "kitchen"},
        {"product_id": 3, "product_name": "lamp", "category": None},
    ]
    return state_frame(spark, _seq(rows), PRODUCTS)


def publish_orders(store, days: list[str], name: str = "orders", properties: dict | None = None) -> dict:
    """`ods.<name>`: the base state tagged `BOOT`, then `days` (of DAY1, DAY2) staged on one branch and published,
    each day's commits carrying `properties[day]` when given; returns the `merge_day` chain's state of every day
    (the oracle)."""
    spark = store.spark
    base = base_orders(spark).localCheckpoint()
    frames = order_changes(spark)
    chain, state = {BOOT: base}, base
    for day in days:
        state = merge_day(state, frames[day], KEYS["orders"]).localCheckpoint()
        chain[day] = state
    properties = properties or {}
    ods_merge.write_state(store, name, BOOT, base, KEYS["orders"], properties=properties.get(BOOT))
    if days:
        branch = f"stage_{name}_{len(days)}"
        staged, main = ods_merge.stage_days(
            store, name, branch, days, lambda d: (frames[d], None), KEYS["orders"], properties=properties
        )
        ods_merge.publish(store, name, branch, staged, main)
    return chain


def publish_once(store, name: str, day: str, state) -> None:
    """`ods.<name>` with one published day: `state` tagged `day`."""
    ods_merge.write_state(store, name, day, state, KEYS[name])
