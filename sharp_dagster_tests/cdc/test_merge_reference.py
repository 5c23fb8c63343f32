"""The pure-Python oracle of the daily binlog merge (`merge_reference.py`) on hand-worked cases."""

from __future__ import annotations

from sharp_dagster_tests.cdc.merge_reference import DELETED, SEQ, change, merge_reference, seq_of

# ---------------------------------------------------------------------------------------------------------------
# the oracle on hand-worked cases

COLUMNS = [("id", "bigint"), ("name", "string"), ("qty", "int")]


def _row(id_, name, qty, seq, deleted=False):
    return {"id": id_, "name": name, "qty": qty, SEQ: seq, DELETED: deleted}


def test_oracle_orders_by_position_and_folds_partial_images():
    base = [_row(1, "a", 1, seq_of(10))]
    changes = [
        change("u", 300, before={"id": 1}, after={"id": 1, "qty": 3}),
        change("u", 200, before={"id": 1}, after={"id": 1, "name": "b", "qty": 2}),
        change("u", 5, before={"id": 1}, after={"id": 1, "name": "replayed"}),  # older than the state row
    ]
    assert merge_reference(base, changes, ["id"], columns=COLUMNS) == [_row(1, "b", 3, seq_of(300))]


def test_oracle_tombstones_and_key_changes():
    base = [_row(1, "a", 1, seq_of(10)), _row(2, "b", 2, seq_of(10))]
    changes = [
        change("d", 20, before={"id": 2, "name": "b", "qty": 2}),
        change("c", 15, after={"id": 2, "name": "late", "qty": 9}),  # before the delete: stays deleted
        change("u", 30, before={"id": 1, "name": "a", "qty": 1}, after={"id": 7, "qty": 5}),
    ]
    assert merge_reference(base, changes, ["id"], columns=COLUMNS) == [
        _row(1, None, None, seq_of(30), True),
        _row(2, None, None, seq_of(20), True),
        _row(7, "a", 5, seq_of(30)),
    ]


def test_oracle_truncates_one_shard_and_ignores_duplicates():
    columns = [("id", "bigint"), ("source_table", "string"), ("name", "string")]
    base = [
        {"id": 1, "source_table": "t_0", "name": "x", SEQ: seq_of(10), DELETED: False},
        {"id": 1, "source_table": "t_1", "name": "y", SEQ: seq_of(10), DELETED: False},
    ]
    insert = change("c", 40, after={"id": 2, "name": "z"}, table="t_0")
    changes = [change("t", 30, table="t_0"), insert, dict(insert, kafka_offset=99)]
    result = merge_reference(
        base, changes, ["id", "source_table"], columns=columns, shard_column="source_table"
    )
    assert result == [
        {"id": 1, "source_table": "t_0", "name": None, SEQ: seq_of(30), DELETED: True},
        {"id": 1, "source_table": "t_1", "name": "y", SEQ: seq_of(10), DELETED: False},
        {"id": 2, "source_table": "t_0", "name": "z", SEQ: seq_of(40), DELETED: False},
    ]
