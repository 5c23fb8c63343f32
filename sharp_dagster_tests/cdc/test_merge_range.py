"""The range merge (`merge_range`) against the chain of daily merges, day by day, on random ranges.

Each scenario's changes (inserts, full and partial updates, key changes, deletes, duplicates, replays of older
positions) are spread over four days at random, so a later day often carries changes older than an earlier
day's: the replays a collector restart delivers, which a daily merge ignores. Expected: the pure-Python oracle
replaying day after day, and `merge_day` chained in Spark.
"""

from __future__ import annotations

import random

import pytest
from pyspark.sql import functions as F

from sharp_dagster.cdc import images
from sharp_dagster.cdc.binlog_schema import RAW_BINLOG_COLUMNS
from sharp_dagster.cdc.merge import DayEvents, merge_day
from sharp_dagster.cdc.merge_range import VERSION_COLUMNS, merge_range, state_on
from sharp_dagster_tests.cdc.test_merge_random import COLUMNS, KEY, SCENARIOS, _sorted, scenario
from sharp_dagster_tests.cdc.test_merge_reference import (
    change,
    changes_frame,
    collect_state,
    merge_reference,
    state_frame,
)

DAYS = ["2024-03-01", "2024-03-02", "2024-03-03", "2024-03-04"]


def _range(seed: int, key=KEY, columns=COLUMNS, shard_column="source_table"):
    """Base rows, changes with their `dt`, and the oracle's state after each day."""
    rng = random.Random(seed)
    base_rows, dated, expected = [], [], {day: [] for day in DAYS}
    for scn in range(SCENARIOS):
        base, events = scenario(scn, seed=seed + scn, sharded_truncates=False)
        if shard_column is None:
            single = {}
            for r in base:
                single.setdefault((r["scn"], r["id"]), {k: v for k, v in r.items() if k != "source_table"})
            base = list(single.values())
        by_day = {day: [] for day in DAYS}
        for event in events:
            by_day[rng.choice(DAYS[:3])].append(event)  # the last day stays empty for some keys
        # A re-delivered day: day 3 repeats some of day 1's changes.
        by_day[DAYS[2]] += rng.sample(by_day[DAYS[0]], min(len(by_day[DAYS[0]]), rng.randint(0, 2)))
        state = base
        for day in DAYS:
            state = merge_reference(state, by_day[day], key, columns=columns, shard_column=shard_column)
            expected[day] += state
            dated += [dict(event, dt=day) for event in by_day[day]]
        base_rows += base
    return base_rows, dated, expected


def _changes(spark, dated):
    schema = ", ".join(f"{name} {typ}" for name, typ in RAW_BINLOG_COLUMNS) + ", dt string"
    names = [name for name, _ in RAW_BINLOG_COLUMNS] + ["dt"]
    return spark.createDataFrame([tuple(e[name] for name in names) for e in dated], schema)


@pytest.fixture(scope="module")
def ranged(spark):
    base_rows, dated, expected = _range(20_000)
    base = state_frame(spark, base_rows, COLUMNS).localCheckpoint()
    return base, dated, expected


def test_each_day_of_the_range_matches_the_oracle_and_the_chain_of_daily_merges(spark, ranged):
    base, dated, expected = ranged
    changes = _changes(spark, dated).localCheckpoint()
    versions = merge_range(
        base, changes, KEY, shard_column="source_table", events=DayEvents()
    ).localCheckpoint()
    assert not set(VERSION_COLUMNS) & set(state_on(versions, DAYS[0]).columns)
    state = base
    for day in DAYS:
        state = merge_day(state, changes.where(F.col("dt") == day), KEY, shard_column="source_table")
        state = state.localCheckpoint()
        got = collect_state(state_on(versions, day))
        assert got == _sorted(expected[day]), day
        assert got == collect_state(state), day
        assert state_on(versions, day).columns == state.columns


def test_typed_images_give_the_same_versions(spark, ranged):
    base, dated, expected = ranged
    typed = images.typed_images(_changes(spark, dated), COLUMNS).localCheckpoint()
    versions = merge_range(
        base, typed, KEY, shard_column="source_table", events=DayEvents()
    ).localCheckpoint()
    for day in DAYS:
        assert collect_state(state_on(versions, day)) == _sorted(expected[day]), day


def test_a_plain_key_without_shards(spark):
    columns = [c for c in COLUMNS if c[0] != "source_table"]
    key = ["scn", "id"]
    base_rows, dated, expected = _range(30_000, key=key, columns=columns, shard_column=None)
    base = state_frame(spark, base_rows, columns)
    versions = merge_range(base, _changes(spark, dated), key, events=DayEvents()).localCheckpoint()
    order = lambda r: (r["scn"], r["id"])  # noqa: E731
    for day in DAYS:
        assert sorted(collect_state(state_on(versions, day)), key=order) == sorted(expected[day], key=order)


def test_a_range_with_a_truncate_or_ddl_or_no_base_is_refused(spark):
    columns = [("id", "bigint"), ("a", "string")]
    base = state_frame(spark, [{"id": 1, "a": "x", "_binlog_seq": 5}], columns)
    changes = changes_frame(spark, [change("c", 10, after={"id": 2, "a": "y"})]).withColumn(
        "dt", F.lit(DAYS[0])
    )
    with pytest.raises(ValueError, match="1 truncated table"):
        merge_range(base, changes, ["id"], events=DayEvents({None: 7}))
    with pytest.raises(ValueError, match="1 DDL statement"):
        merge_range(base, changes, ["id"], events=DayEvents({}, ("ALTER TABLE orders ADD COLUMN b int",)))
    with pytest.raises(ValueError, match="the state before the range"):
        merge_range(None, changes, ["id"], events=DayEvents())
    with pytest.raises(ValueError, match="day column 'dt'"):
        merge_range(base, changes.drop("dt"), ["id"], events=DayEvents())
