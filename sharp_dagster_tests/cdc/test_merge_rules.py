"""Each rule of the daily binlog merge, on real Spark, with small hand-written days."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from sharp_dagster.cdc.merge.fold import (
    DayEvents,
    initial_state,
    latest_changes,
    merge_day,
    merge_key,
    published,
    table_events,
)
from sharp_dagster_tests.cdc.merge_reference import (
    DELETED,
    SEQ,
    change,
    changes_frame,
    collect_state,
    merge_reference,
    seq_of,
    state_frame,
)

COLUMNS = [("id", "bigint"), ("name", "string"), ("qty", "int")]


def row(id_, name, qty, seq, deleted=False, **extra):
    return {"id": id_, "name": name, "qty": qty, **extra, SEQ: seq, DELETED: deleted}


def merged(spark, base_rows, changes, key=("id",), columns=COLUMNS, **kwargs):
    base = state_frame(spark, base_rows, columns) if base_rows is not None else None
    if base is None:
        kwargs.setdefault("columns", columns)
    return collect_state(merge_day(base, changes_frame(spark, changes), list(key), **kwargs))


def test_position_orders_changes_not_timestamps_nor_kafka_offsets(spark):
    base = [row(1, "a", 0, seq_of(1)), row(2, "b", 0, seq_of(1))]
    changes = [
        # Key 1: the same second, the later position wins; Kafka delivered them in the other order.
        change("u", 500, before={"id": 1}, after={"id": 1, "qty": 2}, ts_ms=1000, kafka_offset=1),
        change("u", 400, before={"id": 1}, after={"id": 1, "qty": 1}, ts_ms=1000, kafka_offset=2),
        # Key 2: timestamps run backwards (statement time, not commit time): position still decides.
        change("u", 600, before={"id": 2}, after={"id": 2, "qty": 6}, ts_ms=1000, kafka_offset=3),
        change("u", 550, before={"id": 2}, after={"id": 2, "qty": 5}, ts_ms=9000, kafka_offset=4),
    ]
    assert merged(spark, base, changes) == [row(1, "a", 2, seq_of(500)), row(2, "b", 6, seq_of(600))]


def test_binlog_file_numbers_compare_as_numbers(spark):
    # mysql-bin.1000000 comes after mysql-bin.999999 although it sorts before it as text.
    late = change("u", 4, file="mysql-bin.1000000", before={"id": 1}, after={"id": 1, "name": "late"})
    early = change(
        "u", 9_999_999, file="mysql-bin.999999", before={"id": 1}, after={"id": 1, "name": "early"}
    )
    result = merged(spark, [row(1, "a", 0, seq_of(1))], [late, early])
    assert result == [row(1, "late", 0, int(late["binlog_seq"]))]


def test_replayed_older_events_are_ignored(spark):
    base = [row(1, "current", 5, seq_of(300)), row(2, "b", 2, seq_of(300))]
    changes = [
        change("u", 200, before={"id": 1}, after={"id": 1, "name": "old", "qty": 4}),
        change("d", 250, before={"id": 2, "name": "b", "qty": 2}),
        change(
            "u", 300, before={"id": 1}, after={"id": 1, "name": "same position"}
        ),  # equal: already applied
    ]
    assert merged(spark, base, changes) == base


def test_duplicates_are_applied_once(spark):
    insert = change("c", 10, after={"id": 1, "name": "a", "qty": 1}, kafka_offset=1)
    delete = change("d", 20, before={"id": 1, "name": "a", "qty": 1}, kafka_offset=2)
    # At-least-once delivery re-sent the insert after the delete (same binlog identity, new Kafka offset).
    changes = [insert, delete, dict(insert, kafka_offset=3, ingest_ts_ms=99)]
    assert merged(spark, None, changes) == [row(1, None, None, seq_of(20), True)]


def test_tombstone_blocks_a_replayed_insert_but_a_newer_insert_recreates(spark):
    base = [row(1, None, None, seq_of(100), True), row(2, None, None, seq_of(100), True)]
    changes = [
        change("c", 50, after={"id": 1, "name": "replayed", "qty": 1}),
        change("c", 150, after={"id": 2, "name": "reborn", "qty": 2}),
    ]
    assert merged(spark, base, changes) == [
        row(1, None, None, seq_of(100), True),
        row(2, "reborn", 2, seq_of(150)),
    ]


def test_delete_then_reinsert_within_the_day(spark):
    changes = [
        change("c", 10, after={"id": 1, "name": "a", "qty": 1}),
        change("d", 20, before={"id": 1, "name": "a", "qty": 1}),
        change("c", 30, after={"id": 1, "name": "b", "qty": 2}),
        change("c", 11, after={"id": 2, "name": "x", "qty": 1}),
        change("d", 21, before={"id": 2, "name": "x", "qty": 1}),
    ]
    assert merged(spark, None, changes) == [row(1, "b", 2, seq_of(30)), row(2, None, None, seq_of(21), True)]


def test_primary_key_change_tombstones_the_old_key(spark):
    base = [row(1, "a", 1, seq_of(10))]
    changes = [
        change("u", 20, before={"id": 1, "name": "a", "qty": 1}, after={"id": 5, "name": "a", "qty": 7})
    ]
    assert merged(spark, base, changes) == [row(1, None, None, seq_of(20), True), row(5, "a", 7, seq_of(20))]


def test_primary_key_change_with_a_partial_after_image_takes_the_rest_from_the_before_image(spark):
    changes = [change("u", 20, before={"id": 1, "name": "a", "qty": 1}, after={"id": 5, "qty": 7})]
    assert merged(spark, None, changes) == [row(1, None, None, seq_of(20), True), row(5, "a", 7, seq_of(20))]


def test_partial_images_update_only_the_columns_they_carry(spark):
    base = [row(1, "a", 1, seq_of(10)), row(2, "b", 2, seq_of(10)), row(3, "c", 3, seq_of(10))]
    changes = [
        # Key 1: several partial updates in one day fold column by column.
        change("u", 20, before={"id": 1}, after={"id": 1, "qty": 10}),
        change("u", 30, before={"id": 1}, after={"id": 1, "name": "a2"}),
        change("u", 40, before={"id": 1}, after={"id": 1, "qty": 11}),
        # Key 2: a column carried as JSON null becomes null; an absent column keeps its value.
        change("u", 20, before={"id": 2}, after={"id": 2, "name": None}),
        # Key 3: an insert of the day is the starting point of the later partial update, not the base row.
        change("d", 20, before={"id": 3}),
        change("c", 30, after={"id": 3, "name": "c2", "qty": 30}),
        change("u", 40, before={"id": 3}, after={"id": 3, "qty": 31}),
        # Key 4 (new): a partial update of an unknown key sets what it carries.
        change("u", 50, before={"id": 4}, after={"id": 4, "name": "d"}),
    ]
    assert merged(spark, base, changes) == [
        row(1, "a2", 11, seq_of(40)),
        row(2, None, 2, seq_of(20)),
        row(3, "c2", 31, seq_of(40)),
        row(4, "d", None, seq_of(50)),
    ]


def test_partial_update_after_a_delete_in_a_previous_day(spark):
    base = [row(1, None, None, seq_of(10), True)]
    changes = [change("u", 20, before={"id": 1}, after={"id": 1, "qty": 3})]
    assert merged(spark, base, changes) == [row(1, None, 3, seq_of(20))]


def test_truncate_removes_older_rows_of_the_table(spark):
    base = [row(1, "a", 1, seq_of(10)), row(2, "b", 2, seq_of(60))]
    changes = [
        change("c", 20, after={"id": 3, "name": "c", "qty": 3}),
        change("t", 50),
        change("c", 70, after={"id": 4, "name": "d", "qty": 4}),
        change("u", 80, before={"id": 1}, after={"id": 1, "qty": 9}),
    ]
    result = merged(spark, base, changes)
    assert result == [
        row(1, None, 9, seq_of(80)),  # truncated, then a partial update: only what it carries
        row(2, "b", 2, seq_of(60)),  # newer than the truncate (from a later position of the state)
        row(3, None, None, seq_of(50), True),
        row(4, "d", 4, seq_of(70)),
    ]
    assert collect_state(published(state_frame(spark, result, COLUMNS))) == [
        {"id": 1, "name": None, "qty": 9},
        {"id": 2, "name": "b", "qty": 2},
        {"id": 4, "name": "d", "qty": 4},
    ]


SHARDED = [("id", "bigint"), ("source_table", "string"), ("name", "string")]


def shard_row(id_, shard, name, seq, deleted=False):
    return {"id": id_, "source_table": shard, "name": name, SEQ: seq, DELETED: deleted}


def test_sharded_table_keys_by_shard_and_truncates_one_shard(spark):
    key = merge_key(["id"], shard_column="source_table")
    assert key == ["id", "source_table"]
    base = [shard_row(1, "user_0", "a0", seq_of(10)), shard_row(1, "user_1", "a1", seq_of(10))]
    changes = [
        # The same id in two shards is two rows; a change in one shard leaves the other alone.
        change("u", 20, table="user_1", before={"id": 1}, after={"id": 1, "name": "b1"}),
        change("c", 21, table="user_0", after={"id": 2, "name": "c0"}),
        change("c", 22, table="user_1", after={"id": 2, "name": "c1"}),
        change("t", 30, table="user_0"),
        change("c", 40, table="user_0", after={"id": 3, "name": "d0"}),
    ]
    result = merged(spark, base, changes, key=key, columns=SHARDED, shard_column="source_table")
    assert result == [
        shard_row(1, "user_0", None, seq_of(30), True),
        shard_row(1, "user_1", "b1", seq_of(20)),
        shard_row(2, "user_0", None, seq_of(30), True),
        shard_row(2, "user_1", "c1", seq_of(22)),
        shard_row(3, "user_0", "d0", seq_of(40)),
    ]


def test_business_key_replaces_the_primary_key(spark):
    columns = [("id", "bigint"), ("order_no", "string"), ("qty", "int")]
    base = [{"id": 1, "order_no": "A-1", "qty": 1, SEQ: seq_of(10), DELETED: False}]
    changes = [
        # The table was rebuilt: the same order comes back with a new auto-increment id.
        change("d", 20, before={"id": 1, "order_no": "A-1", "qty": 1}),
        change("c", 21, after={"id": 7, "order_no": "A-1", "qty": 2}),
        change("u", 22, before={"id": 7, "order_no": "A-1"}, after={"id": 7, "order_no": "A-1", "qty": 3}),
    ]
    key = merge_key(["id"], business_key=["order_no"])
    assert merged(spark, base, changes, key=key, columns=columns) == [
        {"id": 7, "order_no": "A-1", "qty": 3, SEQ: seq_of(22), DELETED: False}
    ]


def test_business_key_across_shards_follows_the_row_to_its_new_shard(spark):
    columns = [("order_no", "string"), ("source_table", "string"), ("qty", "int")]
    base = [
        {"order_no": "A-1", "source_table": "user_0", "qty": 1, SEQ: seq_of(10), DELETED: False},
        {"order_no": "B-2", "source_table": "user_0", "qty": 2, SEQ: seq_of(10), DELETED: False},
    ]
    changes = [
        # A-1 moves from shard 0 to shard 1; then shard 0 is truncated: A-1 stays, B-2 goes.
        change("d", 20, table="user_0", before={"order_no": "A-1"}),
        change("c", 21, table="user_1", after={"order_no": "A-1", "qty": 5}),
        change("t", 30, table="user_0"),
    ]
    kwargs = {"key": ["order_no"], "columns": columns, "shard_column": "source_table"}
    expected = merge_reference(base, changes, ["order_no"], columns=columns, shard_column="source_table")
    assert (
        merged(spark, base, changes, **kwargs)
        == expected
        == [
            {"order_no": "A-1", "source_table": "user_1", "qty": 5, SEQ: seq_of(21), DELETED: False},
            {"order_no": "B-2", "source_table": "user_0", "qty": None, SEQ: seq_of(30), DELETED: True},
        ]
    )


def test_business_key_with_a_null_value_is_merged_on_rerun(spark):
    columns = [("id", "bigint"), ("code", "string"), ("qty", "int")]
    changes = [change("c", 10, after={"id": 1, "code": None, "qty": 1})]
    first = merge_day(None, changes_frame(spark, changes), ["code"], columns=columns)
    again = merge_day(
        first, changes_frame(spark, changes + [change("u", 20, after={"code": None, "qty": 2})]), ["code"]
    )
    assert collect_state(again) == [{"id": 1, "code": None, "qty": 2, SEQ: seq_of(20), DELETED: False}]


def test_ddl_add_column_appears_with_defaults_for_old_rows(spark):
    base = [row(1, "a", 1, seq_of(10)), row(2, "b", 2, seq_of(10))]
    changes = [
        change("ddl", 20, ddl="ALTER TABLE orders ADD COLUMN email varchar(64)"),
        change("ddl", 21, ddl="alter table orders add `level` int not null default 3, add note text"),
        change("u", 30, before={"id": 1}, after={"id": 1, "name": "a", "qty": 1, "email": "a@x", "level": 5}),
        change("c", 31, after={"id": 3, "name": "c", "qty": 3, "email": None, "level": 1, "note": "n"}),
    ]
    result = merged(spark, base, changes)
    assert result == [
        row(1, "a", 1, seq_of(30), email="a@x", level=5, note=None),
        row(2, "b", 2, seq_of(10), email=None, level=3, note=None),
        row(3, "c", 3, seq_of(31), email=None, level=1, note="n"),
    ]


def test_caller_passes_the_evolved_column_list(spark):
    base = state_frame(spark, [row(1, "a", 1, seq_of(10))], COLUMNS)
    changes = changes_frame(spark, [change("c", 20, after={"id": 2, "name": "b", "qty": 2, "price": "9.50"})])
    evolved = [*COLUMNS, ("price", "decimal(10,2)")]
    result = merge_day(base, changes, ["id"], columns=evolved)
    assert [f.dataType.simpleString() for f in result.schema] == [
        "bigint",
        "string",
        "int",
        "decimal(10,2)",
        "decimal(38,0)",
        "boolean",
    ]
    assert collect_state(result) == [
        row(1, "a", 1, seq_of(10), price=None),
        row(2, "b", 2, seq_of(20), price=Decimal("9.50")),
    ]


def test_values_are_cast_to_the_column_types(spark):
    columns = [
        ("id", "bigint"),
        ("amount", "decimal(30,10)"),
        ("paid", "boolean"),
        ("created", "timestamp"),
        ("day", "date"),
        ("ratio", "double"),
        ("label", "string"),
    ]
    insert = change("c", 10)
    # Canal sends every value as a string; other collectors send numbers, here one wider than a double.
    insert["after_json"] = (
        '{"id": "42", "amount": 12345678901234567890.1234567891, "paid": 1, "created": "2024-01-02 03:04:05",'
        ' "day": "2024-01-02", "ratio": 0.25, "label": 7}'
    )
    state = merge_day(None, changes_frame(spark, [insert]), ["id"], columns=columns)
    [got] = state.selectExpr("*", "cast(created as string) as created_text").drop("created").collect()
    assert got.asDict() == {
        "id": 42,
        "amount": Decimal("12345678901234567890.1234567891"),
        "paid": True,
        "day": dt.date(2024, 1, 2),
        "ratio": 0.25,
        "label": "7",
        SEQ: Decimal(seq_of(10)),
        DELETED: False,
        "created_text": "2024-01-02 03:04:05",
    }


def test_rerun_of_a_day_changes_nothing(spark):
    base_rows = [row(i, f"n{i}", i, seq_of(10)) for i in range(1, 6)]
    changes = changes_frame(
        spark,
        [
            change("u", 20, before={"id": 1}, after={"id": 1, "qty": 100}),
            change("d", 21, before={"id": 2}),
            change("c", 22, after={"id": 9, "name": "new", "qty": 9}),
            change(
                "u", 23, before={"id": 3, "name": "n3", "qty": 3}, after={"id": 8, "name": "n3", "qty": 3}
            ),
            change("t", 5),
        ],
    )
    once = merge_day(state_frame(spark, base_rows, COLUMNS), changes, ["id"]).localCheckpoint()
    twice = merge_day(once, changes, ["id"])
    assert collect_state(twice) == collect_state(once)
    assert len(collect_state(once)) == 7


def test_none_base_and_latest_changes(spark):
    changes = [
        change("c", 10, after={"id": 1, "name": "a", "qty": 1}),
        change("u", 20, before={"id": 1}, after={"id": 1, "qty": 2}),
        change("c", 30, after={"id": 2, "name": "b", "qty": 1}),
        change("d", 40, before={"id": 2}),
    ]
    expected = [row(1, "a", 2, seq_of(20)), row(2, None, None, seq_of(40), True)]
    assert merged(spark, None, changes) == expected
    delta = latest_changes(changes_frame(spark, changes), ["id"], columns=COLUMNS)
    assert collect_state(delta) == expected


def test_strategies_agree_with_the_oracle(spark):
    base_rows = [row(i, f"n{i}", i, seq_of(100)) for i in range(1, 5)]
    changes = [
        change("u", 150, before={"id": 1}, after={"id": 1, "qty": 10}),
        change("u", 50, before={"id": 2}, after={"id": 2, "qty": 20}),
        change("d", 160, before={"id": 3}),
        change("c", 170, after={"id": 6, "name": "six", "qty": 6}),
        change("u", 180, before={"id": 4, "name": "n4", "qty": 4}, after={"id": 6, "qty": 60}),
    ]
    expected = merge_reference(base_rows, changes, ["id"], columns=COLUMNS)
    for strategy in ("auto", "broadcast", "shuffle"):
        assert merged(spark, base_rows, changes, strategy=strategy) == expected, strategy
    # "auto" falls back to the shuffle when the delta is larger than the broadcast limit.
    assert merged(spark, base_rows, changes, broadcast_max_rows=1) == expected


def test_initial_state_from_a_snapshot(spark):
    snapshot = spark.createDataFrame([(1, "a", 1), (2, "b", 2)], "id bigint, name string, qty int")
    state = initial_state(snapshot, seq_of(100))
    changes = changes_frame(
        spark,
        [
            change("u", 90, before={"id": 1}, after={"id": 1, "qty": 9}),  # already in the snapshot
            change("u", 110, before={"id": 2}, after={"id": 2, "qty": 22}),
        ],
    )
    assert collect_state(merge_day(state, changes, ["id"])) == [
        row(1, "a", 1, seq_of(100)),
        row(2, "b", 22, seq_of(110)),
    ]


def test_table_events_collects_truncates_and_ddl(spark):
    changes = changes_frame(
        spark,
        [
            change("ddl", 30, ddl="ALTER TABLE t ADD COLUMN b int"),
            change("t", 20, table="user_1"),
            change("t", 40, table="user_1"),
            change("t", 10, table="user_2"),
            change("ddl", 5, ddl="ALTER TABLE t ADD COLUMN a int"),
            change("c", 50, after={"id": 1}),
        ],
    )
    assert table_events(changes) == DayEvents(
        {"user_1": seq_of(40), "user_2": seq_of(10)},
        ("ALTER TABLE t ADD COLUMN a int", "ALTER TABLE t ADD COLUMN b int"),
    )


def test_errors_name_what_is_wrong(spark):
    changes = changes_frame(spark, [change("c", 10, after={"id": 1})])
    with pytest.raises(ValueError, match=r"images and DDL give no key columns \['nope'\]"):
        merge_day(None, changes, ["nope"])
    with pytest.raises(ValueError, match=r"key columns \['nope'\]"):
        merge_day(None, changes, ["nope"], columns=COLUMNS)
    with pytest.raises(ValueError, match="no _binlog_seq column"):
        merge_day(spark.createDataFrame([(1,)], "id bigint"), changes, ["id"])
    with pytest.raises(ValueError, match="raw binlog columns"):
        merge_day(None, changes.drop("after_json"), ["id"], columns=COLUMNS)
    with pytest.raises(ValueError, match="unknown merge strategy"):
        merge_day(None, changes, ["id"], columns=COLUMNS, strategy="fast")


def test_a_malformed_row_image_fails_the_merge(spark):
    bad = change("u", 10, before={"id": 1}, after={"id": 1})
    bad["after_json"] = '{"id": 1, "name": '  # cut short: not "an image that carries no column"
    with pytest.raises(Exception, match="MALFORMED_RECORD"):
        merge_day(None, changes_frame(spark, [bad]), ["id"], columns=COLUMNS).collect()


def test_a_day_without_changes_keeps_the_state(spark):
    base = [row(1, "a", 1, seq_of(10)), row(2, None, None, seq_of(20), True)]
    assert merged(spark, base, []) == base
    assert merged(spark, None, []) == []


def test_rows_the_day_does_not_touch_pass_through_unchanged(spark):
    # State rows the day does not touch come out exactly as they went in, whatever their bookkeeping (no
    # position, a tombstone, a null `_is_deleted` read as false), next to touched ones, with either strategy.
    base_rows = [
        row(1, "a", 1, seq_of(100)),
        row(2, "b", 2, None),
        row(3, None, None, seq_of(90), True),
        row(4, "d", 4, seq_of(100), None),
        row(5, "e", 5, seq_of(300)),
    ]
    changes = [
        change("u", 200, before={"id": 1}, after={"id": 1, "qty": 10}),
        change("u", 250, before={"id": 5}, after={"id": 5, "qty": 50}),  # older than the state: ignored
        change("c", 260, after={"id": 7, "name": "g", "qty": 7}),
    ]
    expected = merge_reference(base_rows, changes, ["id"], columns=COLUMNS)
    assert [r for r in expected if r["id"] in (2, 3, 4)] == [
        row(2, "b", 2, None),
        row(3, None, None, seq_of(90), True),
        row(4, "d", 4, seq_of(100), False),
    ]
    for strategy in ("broadcast", "shuffle"):
        assert merged(spark, base_rows, changes, strategy=strategy) == expected, strategy


def test_business_key_across_shards_without_shard_column_fills_the_physical_table(spark):
    # The library call without `shard_column`: the state's `source_table` is the physical table, filled from
    # each change (it used to come out NULL), and the truncate of one shard stays scoped to it.
    columns = [("order_no", "string"), ("source_table", "string"), ("qty", "int")]
    base = [
        {"order_no": "A-1", "source_table": "user_0", "qty": 1, SEQ: seq_of(10), DELETED: False},
        {"order_no": "B-2", "source_table": "user_0", "qty": 2, SEQ: seq_of(10), DELETED: False},
        {"order_no": "C-3", "source_table": "user_1", "qty": 3, SEQ: seq_of(10), DELETED: False},
    ]
    changes = [
        change("d", 20, table="user_0", before={"order_no": "A-1"}),
        change("c", 21, table="user_1", after={"order_no": "A-1", "qty": 5}),
        change("u", 22, table="user_1", before={"order_no": "C-3"}, after={"order_no": "C-3", "qty": 4}),
        change("t", 30, table="user_0"),
    ]
    result = merged(spark, base, changes, key=["order_no"], columns=columns)
    assert result == merge_reference(
        base, changes, ["order_no"], columns=columns, shard_column="source_table"
    )
    assert [(r["order_no"], r["source_table"], r[DELETED]) for r in result] == [
        ("A-1", "user_1", False),
        ("B-2", "user_0", True),
        ("C-3", "user_1", False),
    ]
