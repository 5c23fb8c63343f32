"""The Spark merge against the pure-Python oracle on random days.

Each scenario is a few keys with a random base state and a random day of inserts, full and partial updates,
key changes, deletes, duplicates, replays of older positions and truncates, with Kafka offsets and timestamps
shuffled. Many scenarios run in one Spark merge: the scenario number is part of the key, and each scenario has
shards (physical tables) of its own, so a truncate stays inside its scenario.
"""

from __future__ import annotations

import random

import pytest

from sharp_dagster.cdc.merge.fold import merge_day
from sharp_dagster_tests.cdc.merge_reference import (
    changes_frame,
    collect_state,
    merge_reference,
    state_frame,
)
from sharp_dagster_tests.cdc.merge_scenarios import COLUMNS, KEY, SCENARIOS, scenario, sorted_by_key


def _expected(scenarios, key=KEY, shard_column="source_table") -> list[dict]:
    rows: list[dict] = []
    for base, events in scenarios:
        rows += merge_reference(base, events, key, columns=COLUMNS, shard_column=shard_column)
    return sorted_by_key(rows)


@pytest.fixture(scope="module")
def days():
    return [scenario(scn, seed=1000 + scn) for scn in range(SCENARIOS)]


def test_random_days_match_the_oracle(spark, days):
    base = state_frame(spark, [r for b, _ in days for r in b], COLUMNS)
    changes = changes_frame(spark, [e for _, es in days for e in es])
    result = merge_day(base, changes, KEY, shard_column="source_table").localCheckpoint()
    assert sorted_by_key(collect_state(result)) == _expected(days)
    # Re-running the day on its own result changes nothing.
    again = merge_day(result, changes, KEY, shard_column="source_table")
    assert sorted_by_key(collect_state(again)) == sorted_by_key(collect_state(result))


def test_random_days_with_the_shuffle_strategy_and_without_base(spark, days):
    changes = changes_frame(spark, [e for _, es in days for e in es])
    base = state_frame(spark, [r for b, _ in days for r in b], COLUMNS)
    shuffled = merge_day(base, changes, KEY, shard_column="source_table", strategy="shuffle")
    assert sorted_by_key(collect_state(shuffled)) == _expected(days)
    fresh = merge_day(None, changes, KEY, columns=COLUMNS, shard_column="source_table")
    assert sorted_by_key(collect_state(fresh)) == _expected([([], events) for _, events in days])


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
    assert sorted_by_key(collect_state(state)) == sorted_by_key(expected)


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
