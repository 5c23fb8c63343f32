"""The Spark merge against the pure-Python oracle on random days.

Each scenario is a few keys with a random base state and a random day of inserts, full and partial updates,
key changes, deletes, duplicates, replays of older positions and truncates, with Kafka offsets and timestamps
shuffled. Many scenarios run in one Spark merge: the scenario number is part of the key, and each scenario has
shards (physical tables) of its own, so a truncate stays inside its scenario.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from sharp_dagster.cdc.merge.fold import merge_day
from sharp_dagster_tests.cdc.test_merge_reference import (
    DELETED,
    SEQ,
    change,
    changes_frame,
    collect_state,
    merge_reference,
    seq_of,
    state_frame,
)

COLUMNS = [
    ("scn", "bigint"),
    ("id", "bigint"),
    ("source_table", "string"),
    ("a", "string"),
    ("b", "bigint"),
    ("c", "int"),
]
KEY = ["scn", "id", "source_table"]
VALUES = ("a", "b", "c")
SCENARIOS = 40
FILES = ("mysql-bin.999999", "mysql-bin.1000000")


def _value(rng: random.Random, name: str) -> Any:
    if rng.random() < 0.15:
        return None
    if name == "a":
        return rng.choice(["x", "y", "z", "w"]) + str(rng.randint(0, 9))
    number = rng.randint(-50, 1000)
    return str(number) if rng.random() < 0.3 else number  # Canal strings and plain JSON numbers alike


def scenario(scn: int, seed: int, *, sharded_truncates: bool = True) -> tuple[list[dict], list[dict]]:
    """A random base state and day of changes for scenario `scn`."""
    rng = random.Random(seed)
    shards = [f"s{scn}_t{i}" for i in range(rng.choice([1, 2]))]
    ids = list(range(1, rng.randint(2, 5)))
    base = []
    for shard in shards:
        for id_ in ids:
            if rng.random() < 0.6:
                deleted = rng.random() < 0.2
                values = {v: None if deleted else _value(rng, v) for v in VALUES}
                values["b"] = int(values["b"]) if values["b"] is not None else None
                values["c"] = int(values["c"]) if values["c"] is not None else None
                base.append(
                    {"scn": scn, "id": id_, "source_table": shard, **values}
                    | {SEQ: seq_of(rng.randint(100, 300), file=FILES[0]), DELETED: deleted}
                )
    events: list[dict] = []
    pos = rng.randint(20, 250)  # may start before the base rows' positions: replays
    file_index = 0
    for _ in range(rng.randint(3, 14)):
        pos += rng.randint(1, 40)
        if rng.random() < 0.1 and file_index == 0:
            file_index, pos = 1, rng.randint(4, 50)  # rotate to the next binlog file
        shard = rng.choice(shards)
        id_ = rng.choice(ids + [max(ids) + 1])
        image_key = {"scn": scn, "id": id_}
        where = {"pos": pos, "file": FILES[file_index], "table": shard, "source": f"src{scn}"}
        kind = rng.choices(
            ["insert", "read", "full", "partial", "pk", "delete", "truncate", "duplicate"],
            weights=[4, 1, 3, 5, 2, 3, 1 if sharded_truncates else 0, 2],
        )[0]
        if kind == "duplicate":
            if events:
                events.append(dict(rng.choice(events), kafka_offset=rng.randint(0, 10_000)))
            continue
        if kind in ("insert", "read"):
            after = image_key | {v: _value(rng, v) for v in VALUES if rng.random() < 0.9}
            events.append(change("c" if kind == "insert" else "r", after=after, **where))
        elif kind == "full":
            after = image_key | {v: _value(rng, v) for v in VALUES}
            events.append(change("u", before=dict(image_key), after=after, **where))
        elif kind == "partial":
            carried = rng.sample(VALUES, rng.randint(0, len(VALUES)))
            after = {v: _value(rng, v) for v in carried}
            if rng.random() < 0.7:
                after |= image_key  # a minimal image may leave the key to the before image
            events.append(change("u", before=dict(image_key), after=after, **where))
        elif kind == "pk":
            new_id = rng.choice([i for i in ids + [max(ids) + 1] if i != id_])
            before = image_key | {v: _value(rng, v) for v in VALUES if rng.random() < 0.7}
            after = {"scn": scn, "id": new_id} | {v: _value(rng, v) for v in VALUES if rng.random() < 0.5}
            events.append(change("u", before=before, after=after, **where))
        elif kind == "delete":
            events.append(change("d", before=image_key | {"a": _value(rng, "a")}, **where))
        elif kind == "truncate":
            events.append(change("t", **where))
    for event in events:
        event["kafka_offset"] = rng.randint(0, 10_000)
        event["event_ts_ms"] = 1_700_000_000_000 + rng.randint(0, 3) * 1000  # ties and reversals
    rng.shuffle(events)
    return base, events


def _expected(scenarios, key=KEY, shard_column="source_table") -> list[dict]:
    rows: list[dict] = []
    for base, events in scenarios:
        rows += merge_reference(base, events, key, columns=COLUMNS, shard_column=shard_column)
    return sorted(rows, key=_order)


def _order(row: dict) -> tuple:
    return tuple((row[k] is None, str(row[k])) for k in KEY)


def _sorted(rows: list[dict]) -> list[dict]:
    return sorted(rows, key=_order)


@pytest.fixture(scope="module")
def days():
    return [scenario(scn, seed=1000 + scn) for scn in range(SCENARIOS)]


def test_random_days_match_the_oracle(spark, days):
    base = state_frame(spark, [r for b, _ in days for r in b], COLUMNS)
    changes = changes_frame(spark, [e for _, es in days for e in es])
    result = merge_day(base, changes, KEY, shard_column="source_table").localCheckpoint()
    assert _sorted(collect_state(result)) == _expected(days)
    # Re-running the day on its own result changes nothing.
    again = merge_day(result, changes, KEY, shard_column="source_table")
    assert _sorted(collect_state(again)) == _sorted(collect_state(result))


def test_random_days_with_the_shuffle_strategy_and_without_base(spark, days):
    changes = changes_frame(spark, [e for _, es in days for e in es])
    base = state_frame(spark, [r for b, _ in days for r in b], COLUMNS)
    shuffled = merge_day(base, changes, KEY, shard_column="source_table", strategy="shuffle")
    assert _sorted(collect_state(shuffled)) == _expected(days)
    fresh = merge_day(None, changes, KEY, columns=COLUMNS, shard_column="source_table")
    assert _sorted(collect_state(fresh)) == _expected([([], events) for _, events in days])


def test_random_two_day_chains_match_the_oracle(spark):
    """Day 2 replays part of day 1 (a collector restart) on top of day 1's result."""
    rng = random.Random(7)
    base_rows, day1, day2, expected = [], [], [], []
    for scn in range(SCENARIOS):
        base, events = scenario(scn, seed=5000 + scn)
        events.sort(key=lambda e: int(e["binlog_seq"]))
        cut = rng.randint(0, len(events))
        first, second = events[:cut], events[cut:] + rng.sample(events[:cut], min(cut, rng.randint(0, 3)))
        state = merge_reference(base, first, KEY, columns=COLUMNS, shard_column="source_table")
        expected += merge_reference(state, second, KEY, columns=COLUMNS, shard_column="source_table")
        base_rows += base
        day1 += first
        day2 += second
    state = merge_day(
        state_frame(spark, base_rows, COLUMNS), changes_frame(spark, day1), KEY, shard_column="source_table"
    )
    state = merge_day(state.localCheckpoint(), changes_frame(spark, day2), KEY, shard_column="source_table")
    assert _sorted(collect_state(state)) == _sorted(expected)


def test_random_days_without_shards_match_the_oracle(spark):
    """The plain key (no shard column in it) and whole-table semantics, truncates excluded (they span scenarios)."""
    columns = [c for c in COLUMNS if c[0] != "source_table"]
    days = [scenario(scn, seed=9000 + scn, sharded_truncates=False) for scn in range(SCENARIOS)]
    key = ["scn", "id"]
    expected, base_rows, changes = [], [], []
    for base, events in days:
        # One shard per key here: the oracle and the merge see the same table.
        single = {}
        for r in base:
            single.setdefault((r["scn"], r["id"]), {k: v for k, v in r.items() if k != "source_table"})
        expected += merge_reference(single.values(), events, key, columns=columns)
        base_rows += single.values()
        changes += events
    # A truncate would reach every scenario of the batch (one table), while the oracle runs them one by one.
    assert all(event["op"] != "t" for event in changes)
    result = merge_day(state_frame(spark, base_rows, columns), changes_frame(spark, changes), key)
    order = lambda r: (r["scn"], r["id"])  # noqa: E731
    assert sorted(collect_state(result), key=order) == sorted(expected, key=order)
