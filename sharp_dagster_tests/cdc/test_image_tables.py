"""The typed images tables the landing writes (`cdc/landing/image_tables.py`), read by the daily merge."""

from __future__ import annotations

from decimal import Decimal

from pyspark.sql import functions as F

from sharp_dagster.cdc.landing.image_tables import images_table_ref, read_typed_images, write_typed_images
from sharp_dagster.cdc.merge.fold import merge_day
from sharp_dagster_tests.cdc.merge_reference import change, changes_frame, collect_state, state_frame

KNOWN = {"orders": [("id", "bigint"), ("amount", "decimal(12,2)"), ("note", "string")]}


def landed(spark, rows, table="orders", day="2024-01-01", hour="10"):
    """Raw binlog rows as the landing holds them: the raw columns plus table_name, dt and hour."""
    return (
        changes_frame(spark, rows)
        .withColumn("table_name", F.lit(table))
        .withColumn("dt", F.lit(day))
        .withColumn("hour", F.lit(hour))
    )


def test_each_table_gets_typed_images_once_and_a_later_ddl_adds_a_field(spark, table_store):
    first = [
        change("c", 10, after={"id": "1", "amount": "12.50", "note": "a"}),  # Canal's strings
        change("c", 11, after={"id": 2, "amount": 3.25, "note": None}),  # typed JSON values
    ]
    other = [change("c", 12, table="users", after={"id": 7, "score": 1.5, "ok": True})]
    rows = landed(spark, first).unionByName(landed(spark, other, table="users"))
    written = write_typed_images(table_store, "shop", rows, ["orders", "users"], KNOWN)
    assert written == {"orders": 2, "users": 1}
    orders = read_typed_images(table_store, "shop", "orders", "2024-01-01")
    assert [(f.name, f.dataType.simpleString()) for f in orders.schema["after"].dataType.fields] == KNOWN[
        "orders"
    ]
    assert {r.after.id: r.after.amount for r in orders.collect()} == {1: Decimal("12.50"), 2: Decimal("3.25")}
    users = read_typed_images(table_store, "shop", "users", "2024-01-01")
    # No configured schema: typed by the JSON values, decimals wide enough for later hours.
    assert [(f.name, f.dataType.simpleString()) for f in users.schema["after"].dataType.fields] == [
        ("id", "bigint"),
        ("score", "decimal(38,18)"),
        ("ok", "boolean"),
    ]
    assert users.first().after.asDict() == {"id": 7, "score": Decimal("1.5"), "ok": True}

    # Re-landing the same rows writes nothing twice.
    assert write_typed_images(table_store, "shop", rows, ["orders", "users"], KNOWN) == {
        "orders": 0,
        "users": 0,
    }

    # A later hour adds a column by DDL: the images table gains the field, the earlier rows read it as null.
    later = [
        change("ddl", 20, ddl="ALTER TABLE orders ADD COLUMN qty int DEFAULT 0"),
        change("c", 21, after={"id": 3, "amount": "1.00", "note": "c", "qty": "4"}),
    ]
    assert write_typed_images(table_store, "shop", landed(spark, later, hour="11"), ["orders"], KNOWN) == {
        "orders": 2
    }
    orders = read_typed_images(table_store, "shop", "orders", "2024-01-01")
    assert [f.name for f in orders.schema["after"].dataType.fields] == ["id", "amount", "note", "qty"]
    assert {r.after.id: r.after.qty for r in orders.where("op = 'c'").collect()} == {1: None, 2: None, 3: 4}
    assert table_store.exists(images_table_ref("shop", "orders"))


def test_the_merge_of_the_typed_images_equals_the_merge_of_the_raw_rows(spark, table_store):
    columns = KNOWN["orders"]
    base = state_frame(
        spark,
        [{"id": 1, "amount": Decimal("1.00"), "note": "a", "_binlog_seq": 1, "_is_deleted": False}],
        columns,
    )
    day = [
        change("u", 10, after={"id": 1, "note": "b"}, before={"id": 1}),
        change("c", 11, after={"id": 2, "amount": "2.50", "note": None}),
        change("t", 12),
        change("c", 13, after={"id": 3, "amount": "3", "note": "after the truncate"}),
        change("d", 14, before={"id": 3}),
        change("c", 15, after={"id": 4, "amount": 4.75, "note": "x"}),
    ]
    rows = landed(spark, day)
    write_typed_images(table_store, "shop", rows, ["orders"], KNOWN)
    typed = read_typed_images(table_store, "shop", "orders", "2024-01-01")
    assert typed.count() == len(day)  # every op, the truncate too (the merge reads its events from them)
    from_typed = collect_state(merge_day(base, typed, ["id"]))
    from_raw = collect_state(merge_day(base, changes_frame(spark, day), ["id"]))
    assert sorted(from_typed, key=lambda r: r["id"]) == sorted(from_raw, key=lambda r: r["id"])
    assert {r["id"]: r["amount"] for r in from_typed if not r["_is_deleted"]} == {4: Decimal("4.75")}

    from sharp_dagster.cdc.landing.raw_tables import raw_table_ref
    from sharp_dagster.cdc.merge.change_source import day_changes

    orders, raw = ("shop", "orders"), raw_table_ref("shop")
    table_store.append(raw, rows)
    changes, _, events = day_changes(table_store, raw, *orders, "2024-01-01")
    assert "after" in changes.columns and events.truncates, "the typed images hold the day, truncate included"


def test_the_merge_reads_the_raw_rows_when_the_images_are_incomplete_or_do_not_fit(spark, table_store):
    from sharp_dagster.cdc.landing.raw_tables import raw_table_ref
    from sharp_dagster.cdc.merge.change_source import day_changes, raw_counts_by_day
    from sharp_dagster.cdc.merge.fold import table_events

    orders, raw = ("shop", "orders"), raw_table_ref("shop")
    hour10 = landed(spark, [change("c", 10, after={"id": 1, "amount": "1.25", "note": "a"})])
    table_store.append(raw, hour10)
    write_typed_images(table_store, "shop", hour10, ["orders"], KNOWN)
    assert "after" in day_changes(table_store, raw, *orders, "2024-01-01")[0].columns  # complete: typed
    # The raw rows are counted per day from partition metadata.
    days = ["2024-01-01", "2024-01-02"]
    assert raw_counts_by_day(table_store, raw, "orders", days) == {days[0]: 1, days[1]: 0}

    # A value the images table's type would round (amount is decimal(12,2) there): kept aside, not rounded.
    hour11 = landed(spark, [change("c", 20, after={"id": 2, "amount": "2.125", "note": "b"})], hour="11")
    table_store.append(raw, hour11)
    write_typed_images(table_store, "shop", hour11, ["orders"], KNOWN)
    typed = read_typed_images(table_store, "shop", "orders", "2024-01-01").where("after.id = 2").first()
    assert typed.cast_errors == ["amount"]
    changes, rows, events = day_changes(table_store, raw, *orders, "2024-01-01")
    assert (
        "after_json" in changes.columns and changes.count() == rows == 2
    )  # the JSON, typed by the state's columns
    assert events == table_events(changes)  # collected in the counting scan

    # Raw rows the images lack (a landing that wrote its raw rows, then died): the raw rows again.
    hour12 = landed(spark, [change("c", 30, after={"id": 3, "amount": "3", "note": "c"})], hour="12")
    table_store.append(raw, hour12)
    assert "after_json" in day_changes(table_store, raw, *orders, "2024-01-01")[0].columns
