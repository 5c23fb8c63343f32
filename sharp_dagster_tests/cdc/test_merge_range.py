"""The range merge (`range.range_rows`) against the chain of daily merges, day by day, on random ranges.

Each scenario's changes (inserts, full and partial updates, key changes, deletes, duplicates, replays of older
positions) are spread over four days at random, so a later day often carries changes older than an earlier
day's: the replays a collector restart delivers, which a daily merge ignores. Expected: the pure-Python oracle
replaying day after day, and `merge_day` chained in Spark. The state after day d is rebuilt from the range's rows
as the ODS writes build it: the state before the range, each key's row of its latest day up to d in its place.
"""

from __future__ import annotations

import random

import pytest
from pyspark.sql import Window
from pyspark.sql import functions as F

from sharp_dagster.cdc.change import images
from sharp_dagster.cdc.change.binlog_schema import RAW_BINLOG_COLUMNS
from sharp_dagster.cdc.merge.fold import DayEvents, merge_day
from sharp_dagster.cdc.merge.range import BEFORE_COLUMN, DAY_COLUMN, range_mergeable, range_rows
from sharp_dagster.cdc.merge.result import DELETED_COLUMN
from sharp_dagster_tests.cdc.merge_reference import (
    change,
    changes_frame,
    collect_state,
    merge_reference,
    state_frame,
)
from sharp_dagster_tests.cdc.merge_scenarios import COLUMNS, KEY, SCENARIOS, scenario, sorted_by_key

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


def _state_after(base, rows, key, day):
    """The state after `day`: `base`'s rows of the keys the range has not touched by then, and each touched key's
    row of its latest day up to `day`."""
    upto = rows.where(F.col(DAY_COLUMN) <= day)
    latest = Window.partitionBy(*key).orderBy(F.col(DAY_COLUMN).desc())
    newest = upto.withColumn("__n", F.row_number().over(latest)).where("__n = 1")
    newest = newest.drop("__n", DAY_COLUMN, BEFORE_COLUMN)
    on = [base[k].eqNullSafe(newest[k]) for k in key]
    kept = base.join(newest, on, "left_anti")
    return kept.unionByName(newest.select(*base.columns))


def _check_before(rows, base, key):
    """`BEFORE_COLUMN` of each row: the key's row before that day (the state's for its first day, else the key's
    row of its previous day in the range), its `_is_deleted`, null where the key had no row."""
    got = {
        (tuple(r[k] for k in key), r[DAY_COLUMN]): (r[BEFORE_COLUMN], r[DELETED_COLUMN])
        for r in rows.collect()
    }
    state = {tuple(r[k] for k in key): r[DELETED_COLUMN] for r in base.collect()}
    for (k, day), (before, _) in sorted(got.items(), key=lambda item: (str(item[0][0]), item[0][1])):
        earlier = [d for (kk, d) in got if kk == k and d < day]
        expected = got[(k, max(earlier))][1] if earlier else state.get(k)
        assert before == expected, (k, day)


@pytest.fixture(scope="module")
def ranged(spark):
    base_rows, dated, expected = _range(20_000)
    base = state_frame(spark, base_rows, COLUMNS).localCheckpoint()
    return base, dated, expected


def test_each_day_of_the_range_matches_the_oracle_and_the_chain_of_daily_merges(spark, ranged):
    base, dated, expected = ranged
    changes = _changes(spark, dated).localCheckpoint()
    rows, _ = range_rows(base, changes, KEY, shard_column="source_table", events=DayEvents())
    rows = rows.localCheckpoint()
    _check_before(rows, base, KEY)
    state = base
    for day in DAYS:
        state = merge_day(state, changes.where(F.col("dt") == day), KEY, shard_column="source_table")
        state = state.localCheckpoint()
        got = collect_state(_state_after(base, rows, KEY, day))
        assert got == sorted_by_key(expected[day]), day
        assert got == collect_state(state), day


def test_typed_images_give_the_same_rows(spark, ranged):
    base, dated, expected = ranged
    typed = images.typed_images(_changes(spark, dated), COLUMNS).localCheckpoint()
    rows, _ = range_rows(base, typed, KEY, shard_column="source_table", events=DayEvents())
    rows = rows.localCheckpoint()
    for day in DAYS:
        assert collect_state(_state_after(base, rows, KEY, day)) == sorted_by_key(expected[day]), day


def test_a_plain_key_without_shards(spark):
    columns = [c for c in COLUMNS if c[0] != "source_table"]
    key = ["scn", "id"]
    base_rows, dated, expected = _range(30_000, key=key, columns=columns, shard_column=None)
    base = state_frame(spark, base_rows, columns)
    rows, _ = range_rows(base, _changes(spark, dated), key, events=DayEvents())
    rows = rows.localCheckpoint()
    _check_before(rows, base, key)
    order = lambda r: (r["scn"], r["id"])  # noqa: E731
    for day in DAYS:
        got = collect_state(_state_after(base, rows, key, day))
        assert sorted(got, key=order) == sorted(expected[day], key=order), day


def test_a_range_with_a_truncate_or_ddl_or_no_base_is_refused(spark):
    columns = [("id", "bigint"), ("a", "string")]
    base = state_frame(spark, [{"id": 1, "a": "x", "_binlog_seq": 5}], columns)
    changes = changes_frame(spark, [change("c", 10, after={"id": 2, "a": "y"})]).withColumn(
        "dt", F.lit(DAYS[0])
    )
    truncate, ddl = DayEvents({None: 7}), DayEvents({}, ("ALTER TABLE orders ADD COLUMN b int",))
    assert not range_mergeable([DayEvents(), truncate]) and not range_mergeable([ddl, DayEvents()])
    assert not range_mergeable([DayEvents(), None]) and range_mergeable([DayEvents(), DayEvents()])
    with pytest.raises(ValueError, match="1 truncated table"):
        range_rows(base, changes, ["id"], events=truncate)
    with pytest.raises(ValueError, match="1 DDL statement"):
        range_rows(base, changes, ["id"], events=ddl)
    with pytest.raises(ValueError, match="the state before the range"):
        range_rows(None, changes, ["id"], events=DayEvents())
    with pytest.raises(ValueError, match="day column 'dt'"):
        range_rows(base, changes.drop("dt"), ["id"], events=DayEvents())
