"""The daily merge's contract without traps (issue 16): a key column naming the physical table tells shards apart
whether or not `shard_column` is passed, a first day merges with no base and no `columns`, and a sharded table
whose key cannot tell its shards apart is refused when the config loads. Real Spark, small hand-written days."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from sharp_dagster.cdc.merge.fold import merge_day, merge_key
from sharp_dagster.cdc.source.config import ConfigError, source_config_from_dict
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

SHARDED = [("id", "bigint"), ("source_table", "string"), ("name", "string")]
KEY = ["source_table", "id"]


def as_canal_strings(row: dict) -> dict:
    """The same change with Canal's all-strings images (`"1"` for 1)."""

    def strings(image: str | None) -> str | None:
        if image is None:
            return None
        return json.dumps({k: None if v is None else str(v) for k, v in json.loads(image).items()})

    return {**row, "after_json": strings(row["after_json"]), "before_json": strings(row["before_json"])}


def shard_row(id_, shard, name, seq, deleted=False):
    return {"id": id_, "source_table": shard, "name": name, SEQ: seq, DELETED: deleted}


# Ids 1 and 2 exist in both shards; shard user_0 is truncated, then gets a new row.
BASE = [shard_row(1, "user_0", "a0", seq_of(10)), shard_row(1, "user_1", "a1", seq_of(10))]
DAY = [
    change("u", 20, table="user_1", before={"id": 1}, after={"id": 1, "name": "b1"}),
    change("c", 21, table="user_0", after={"id": 2, "name": "c0"}),
    change("c", 22, table="user_1", after={"id": 2, "name": "c1"}),
    change("u", 23, table="user_0", before={"id": 2}, after={"id": 2, "name": "c0'"}),
    change("d", 24, table="user_1", before={"id": 2, "name": "c1"}),
    change("t", 30, table="user_0"),
    change("c", 40, table="user_0", after={"id": 3, "name": "d0"}),
]
EXPECTED = [
    shard_row(1, "user_0", None, seq_of(30), True),
    shard_row(1, "user_1", "b1", seq_of(20)),
    shard_row(2, "user_0", None, seq_of(30), True),
    shard_row(2, "user_1", None, seq_of(24), True),
    shard_row(3, "user_0", "d0", seq_of(40)),
]


@pytest.mark.parametrize("images", ["typed", "canal_strings"])
@pytest.mark.parametrize("shard_column", ["source_table", None])
def test_a_key_naming_the_physical_table_keeps_colliding_ids_apart(spark, shard_column, images):
    day = DAY if images == "typed" else [as_canal_strings(r) for r in DAY]
    oracle = merge_reference(BASE, DAY, KEY, columns=SHARDED, shard_column="source_table")
    assert oracle == EXPECTED
    for strategy in ("broadcast", "shuffle"):
        state = merge_day(
            state_frame(spark, BASE, SHARDED),
            changes_frame(spark, day),
            KEY,
            shard_column=shard_column,
            strategy=strategy,
        )
        assert collect_state(state) == EXPECTED, (strategy, shard_column, images)


@pytest.mark.parametrize("shard_column", ["source_table", None])
def test_a_sharded_first_day_keeps_colliding_ids_apart(spark, shard_column):
    day = [
        change("c", 10, table="user_0", after={"id": 1, "name": "a0"}),
        change("c", 11, table="user_1", after={"id": 1, "name": "a1"}),
        change("u", 12, table="user_1", before={"id": 1}, after={"id": 1, "name": "b1"}),
    ]
    state = merge_day(
        None,
        changes_frame(spark, day),
        merge_key(["id"], shard_column="source_table"),
        shard_column=shard_column,
    )
    assert state.columns == ["id", "name", "source_table", SEQ, DELETED]
    assert collect_state(state.select(*[n for n, _ in SHARDED], SEQ, DELETED)) == [
        shard_row(1, "user_0", "a0", seq_of(10)),
        shard_row(1, "user_1", "b1", seq_of(12)),
    ]


def test_two_columns_for_the_physical_table_are_refused(spark):
    with pytest.raises(ValueError, match="holds the physical table, but shard_column is 'shard'"):
        merge_day(
            None,
            changes_frame(spark, DAY),
            KEY,
            columns=SHARDED + [("shard", "string")],
            shard_column="shard",
        )


def test_a_first_day_without_base_or_columns_takes_them_from_the_typed_images(spark):
    day = [
        change("c", 10, after={"id": 1, "name": "a", "price": 12.50, "paid": True, "note": None}),
        change("c", 11, after={"id": 2, "name": "b", "price": 3.125, "paid": False, "note": None}),
        change("u", 12, before={"id": 1}, after={"id": 1, "price": 13}),  # a partial image: not the order
        change("d", 13, before={"id": 2, "name": "b", "price": 3.125, "paid": False, "note": None}),
    ]
    state = merge_day(None, changes_frame(spark, day), ["id"])
    assert [(f.name, f.dataType.simpleString()) for f in state.schema] == [
        ("id", "bigint"),
        ("name", "string"),
        ("price", "decimal(23,3)"),  # 12.5, 3.125 and the integer 13: no value loses digits
        ("paid", "boolean"),
        ("note", "string"),
        (SEQ, "decimal(38,0)"),
        (DELETED, "boolean"),
    ]
    assert collect_state(state) == [
        {
            "id": 1,
            "name": "a",
            "price": Decimal("13.000"),
            "paid": True,
            "note": None,
            SEQ: seq_of(12),
            DELETED: False,
        },
        {"id": 2, "name": None, "price": None, "paid": None, "note": None, SEQ: seq_of(13), DELETED: True},
    ]


def test_a_first_day_of_canal_string_images_gives_string_columns_unless_its_ddl_types_them(spark):
    day = [
        change("c", 10, after={"id": "1", "name": "a", "qty": "7"}),
        change(
            "u", 11, before={"id": "1", "name": "a", "qty": "7"}, after={"id": "1", "name": "a", "qty": "8"}
        ),
    ]
    untyped = merge_day(None, changes_frame(spark, day), ["id"])
    assert [(f.name, f.dataType.simpleString()) for f in untyped.schema][:3] == [
        ("id", "string"),
        ("name", "string"),
        ("qty", "string"),
    ]
    assert collect_state(untyped) == [{"id": "1", "name": "a", "qty": "8", SEQ: seq_of(11), DELETED: False}]

    # The table was created that day: its DDL types the columns, and a later ALTER adds one with a default that
    # the rows written before it take.
    ddl = [
        change("ddl", 5, ddl="CREATE TABLE orders (id bigint PRIMARY KEY, name varchar(9), qty int)"),
        change("ddl", 20, ddl="ALTER TABLE orders ADD COLUMN level int NOT NULL DEFAULT 3"),
        change("c", 21, after={"id": "2", "name": "b", "qty": "1", "level": "5"}),
    ]
    typed = merge_day(None, changes_frame(spark, ddl + day), ["id"])
    assert [(f.name, f.dataType.simpleString()) for f in typed.schema][:4] == [
        ("id", "bigint"),
        ("name", "string"),
        ("qty", "int"),
        ("level", "int"),
    ]
    assert collect_state(typed) == [
        {"id": 1, "name": "a", "qty": 8, "level": 3, SEQ: seq_of(11), DELETED: False},
        {"id": 2, "name": "b", "qty": 1, "level": 5, SEQ: seq_of(21), DELETED: False},
    ]


def test_a_first_day_with_nothing_to_take_columns_from_is_a_clear_error(spark):
    with pytest.raises(ValueError, match=r"give no key columns \['id'\].*pass the table's `columns`"):
        merge_day(None, changes_frame(spark, []), ["id"])


def _config(table: dict) -> dict:
    return {"source_id": "s", "databases": [{"name": "shop", "tables": [table]}]}


def test_a_sharded_table_whose_key_cannot_tell_shards_apart_is_refused_at_load():
    sharded = {"name": "user_info", "shard_regex": r"user_info_(\d+)", "primary_key": ["id"]}
    with pytest.raises(ConfigError) as err:
        source_config_from_dict(_config({**sharded, "business_key": ["user_code"]}), origin="shop.yaml")
    message = str(err.value)
    assert message.startswith("shop.yaml: databases[0].tables[0].business_key: ")
    assert "table shop.user_info is sharded" in message and "cannot tell its shards apart" in message

    # The primary key is made shard-proof (source_table added); a business key holding source_table, or one
    # declared unique across the shards, is taken as it is.
    table = source_config_from_dict(_config(sharded)).databases[0].table("user_info")
    assert table.merge_key == ("id", "source_table")
    with_shard = source_config_from_dict(_config({**sharded, "business_key": ["code", "source_table"]}))
    assert with_shard.databases[0].table("user_info").merge_key == ("code", "source_table")
    declared = {**sharded, "business_key": ["user_code"], "unique_across_shards": True}
    assert source_config_from_dict(_config(declared)).databases[0].table("user_info").merge_key == (
        "user_code",
    )
    plain = {"name": "orders", "primary_key": ["id"]}
    assert source_config_from_dict(_config(plain)).databases[0].table("orders").merge_key == ("id",)
    with pytest.raises(ConfigError, match=r"tables\[0\].unique_across_shards: only for a sharded table"):
        source_config_from_dict(_config({**plain, "business_key": ["c"], "unique_across_shards": True}))
    with pytest.raises(ConfigError, match="unique_across_shards: expected true or false"):
        source_config_from_dict(_config({**declared, "unique_across_shards": "yes"}))
