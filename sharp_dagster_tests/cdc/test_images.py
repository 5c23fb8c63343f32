"""Typed row images (`cdc/change/images.py`): what the landing writes so that the daily merge parses no JSON."""

from __future__ import annotations

from decimal import Decimal

import pytest

from sharp_dagster.cdc.change.images import image_columns, typed_images
from sharp_dagster.cdc.merge.fold import merge_day
from sharp_dagster_tests.cdc.merge_reference import change, changes_frame, collect_state, state_frame

COLUMNS = [("id", "bigint"), ("qty", "int"), ("amount", "decimal(20,4)"), ("note", "string")]


def test_canal_strings_and_typed_json_values_give_the_same_typed_image(spark):
    canal = change("c", 10, after={"id": "1", "qty": "7", "amount": "12345678901234.5678", "note": None})
    typed_json = change("c", 11, after={"id": 1, "qty": 7, "amount": 0.5, "note": None})
    # A JSON number with more digits than a Python float holds, written as the collector writes it.
    typed_json["after_json"] = typed_json["after_json"].replace("0.5", "12345678901234.5678")
    rows = typed_images(changes_frame(spark, [canal, typed_json]), COLUMNS).orderBy("binlog_pos").collect()
    for row in rows:
        assert row.after.asDict() == {
            "id": 1,
            "qty": 7,
            "amount": Decimal("12345678901234.5678"),  # exact: wider than a double's digits
            "note": None,
        }
        assert sorted(row.after_cols) == ["amount", "id", "note", "qty"]  # note: a JSON null, carried
        assert row.before is None and row.cast_errors is None


def test_a_partial_image_lists_only_the_columns_it_carries(spark):
    update = change("u", 10, after={"id": 1, "qty": 3}, before={"id": 1, "qty": 2, "note": "x"})
    row = typed_images(changes_frame(spark, [update]), COLUMNS).first()
    assert sorted(row.after_cols) == ["id", "qty"] and row.after.note is None
    assert sorted(row.before_cols) == ["id", "note", "qty"] and row.before.note == "x"


def test_a_value_not_of_its_type_is_kept_aside_and_the_merge_refuses_the_event(spark):
    bad = change("c", 10, after={"id": 1, "qty": "many", "amount": "1.5", "note": "n"})
    typed = typed_images(changes_frame(spark, [bad]), COLUMNS).localCheckpoint()
    row = typed.first()
    assert row.cast_errors == ["qty"] and row.after.qty is None  # the landing itself never fails on a value
    with pytest.raises(Exception, match=rf"binlog event {row.event_uid} of orders: .* in qty"):
        collect_state(merge_day(None, typed, ["id"], columns=COLUMNS))


def test_typed_and_raw_changes_merge_alike(spark):
    base = state_frame(
        spark,
        [
            {
                "id": 1,
                "qty": 1,
                "amount": Decimal("1.0000"),
                "note": "a",
                "_binlog_seq": 1,
                "_is_deleted": False,
            }
        ],
        COLUMNS,
    )
    day = [
        change("u", 10, after={"id": 1, "qty": 5}, before={"id": 1, "qty": 1}),  # partial: keeps note
        change("c", 11, after={"id": 2, "qty": 2, "amount": "2.5", "note": None}),
        change("u", 12, after={"id": 3, "qty": 2, "amount": "2.5", "note": "moved"}, before={"id": 2}),
        change("d", 13, before={"id": 1}),
        change("c", 14, after={"id": 1, "qty": 9, "amount": "9", "note": "back"}),
    ]
    raw = changes_frame(spark, day)
    # Typed by other (wider) types than the state's, as a landing typing by JSON values would: the merge casts.
    typed = typed_images(raw, [("id", "bigint"), ("qty", "bigint"), ("amount", "double"), ("note", "string")])
    from_raw = collect_state(merge_day(base, raw, ["id"]))
    from_typed = collect_state(merge_day(base, typed, ["id"]))
    assert sorted(from_typed, key=lambda r: r["id"]) == sorted(from_raw, key=lambda r: r["id"])
    assert {r["id"]: (r["qty"], r["note"], r["_is_deleted"]) for r in from_typed if not r["_is_deleted"]} == {
        1: (9, "back", False),
        3: (2, "moved", False),
    }
    assert [r["id"] for r in from_typed if r["_is_deleted"]] == [2]  # the key moved away: a tombstone
    # A first day with neither base nor columns takes the typed images' fields.
    first = collect_state(merge_day(None, typed, ["id"]))
    assert {r["id"] for r in first if not r["_is_deleted"]} == {1, 3}


def test_image_columns_put_the_known_schema_first_then_ddl_then_json_types(spark):
    day = [
        change("ddl", 5, ddl="ALTER TABLE orders ADD COLUMN flag tinyint DEFAULT 0"),
        change("c", 10, after={"id": 1, "qty": 2, "price": 1.25, "label": "x", "flag": 1}),
    ]
    raw = changes_frame(spark, day)
    columns = image_columns(raw, [day[0]["ddl_sql"]], known=[("id", "bigint"), ("qty", "int")])
    assert columns[:2] == [("id", "bigint"), ("qty", "int")]
    names = [c for c, _ in columns]
    assert names.index("flag") == 2  # the DDL's column, with the DDL's type, before the image-only ones
    assert dict(columns)["price"].startswith("decimal") and dict(columns)["label"] == "string"
