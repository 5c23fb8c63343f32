"""The current-state ODS layout (issue 33) against the pure fold: days merged merge-on-read onto a branch, published
as tags, read back at each tag, must be the chain of `merge_day` results, row for row; a re-run of day 1 rebuilds
days 1 and 2 from the bootstrap tag and re-publishes both; a stale publish is fenced; a rollback moves `main` back
to a tag; a day that adds a column with a default rewrites its rows. Real Spark and Iceberg (one warehouse for the
whole test: one Spark session, few commits)."""

from __future__ import annotations

import random

import pytest
from pyspark.sql import functions as F

from sharp_dagster.cdc.merge.fold import merge_day
from sharp_dagster.cdc.ods import merge as ods_merge
from sharp_dagster.cdc.ods import store as ods_store
from sharp_dagster.cdc.ods.versions import day_tag, ods_ref
from sharp_dagster.spark.wap import StalePublishError
from sharp_dagster_tests.cdc.merge_reference import (
    DELETED,
    SEQ,
    change,
    changes_frame,
    collect_state,
    seq_of,
    state_frame,
)
from sharp_dagster_tests.cdc.merge_scenarios import COLUMNS, KEY, scenario

TABLE = "orders_v"
SHARD = "source_table"
BOOT, DAY1, DAY2 = "2024-01-01", "2024-01-02", "2024-01-03"


def _days(seed: int):
    """Base rows and two days of random changes (replays of day 1 in day 2) over 15 scenarios."""
    rng = random.Random(seed)
    base, day1, day2 = [], [], []
    for scn in range(15):
        rows, events = scenario(scn, seed=seed + scn)
        events.sort(key=lambda e: int(e["binlog_seq"]))
        cut = rng.randint(0, len(events))
        base += rows
        day1 += events[:cut]
        day2 += events[cut:] + rng.sample(events[:cut], min(cut, 2))
    return base, day1, day2


def _comparable(rows: list[dict], columns=COLUMNS) -> list[tuple]:
    """A state as the storage keeps it: live rows whole, tombstones as key, shard and position."""
    out = []
    for r in rows:
        if r[DELETED]:
            out.append((True, *(r[k] for k in KEY), r[SEQ]))
        else:
            out.append((False, *(r[c] for c, _ in columns), r[SEQ]))
    return sorted(out, key=lambda t: tuple((v is None, str(v)) for v in t))


def _stored(store, day: str, columns=COLUMNS, table: str = TABLE) -> list[tuple]:
    return _comparable(collect_state(ods_store.state_at(store, table, day_tag(day))), columns)


def test_days_as_tags_agree_with_the_chain_of_merge_day(spark, table_store):
    store = table_store
    base_rows, day1, day2 = _days(700)
    base = state_frame(spark, base_rows, COLUMNS).localCheckpoint()
    frames = {DAY1: changes_frame(spark, day1), DAY2: changes_frame(spark, day2)}
    state1 = merge_day(base, frames[DAY1], KEY, shard_column=SHARD).localCheckpoint()
    state2 = merge_day(state1, frames[DAY2], KEY, shard_column=SHARD).localCheckpoint()

    ods_merge.write_state(store, TABLE, BOOT, base, KEY, SHARD)
    assert _stored(store, BOOT) == _comparable(collect_state(base))

    def changes_of(day):
        return frames[day], None

    for day, expected in ((DAY1, state1), (DAY2, state2)):
        branch = f"stage_{day.replace('-', '_')}_1"
        staged, main = ods_merge.stage_days(store, TABLE, branch, [day], changes_of, KEY, SHARD)
        assert [s.day for s in staged] == [day]
        assert ods_store.published_days(store, TABLE)[-1] < day  # staged, not published
        ods_merge.publish(store, TABLE, branch, staged, main)
        assert _stored(store, day) == _comparable(collect_state(expected)), day

    # The readers' SQL: a day by its tag, the latest state without one; no full copy was written per day.
    name = store.name(ods_ref(TABLE))
    day1_live = spark.sql(f"SELECT count(*) FROM {name} VERSION AS OF '{DAY1}'").first()[0]
    assert day1_live == state1.where(f"NOT {DELETED}").count()
    assert spark.sql(f"SELECT count(*) FROM {name}").first()[0] == state2.where(f"NOT {DELETED}").count()
    formats = {r[0] for r in spark.sql(f"SELECT file_format FROM {name}.delete_files").collect()}
    assert formats == {"PUFFIN"}  # format v3 deletion vectors
    # Merge-on-read: no day removed a data file (untouched rows are never rewritten); each day's commits either
    # add deletion vectors (the `DELETE FROM` of the replaced rows) or add rows (the append of its live rows).
    summaries = [s.summary() for s in _snapshots(store)]
    assert [int(s.get("deleted-data-files") or 0) for s in summaries] == [0] * len(summaries)
    added = [(int(s.get("added-dvs") or 0), int(s.get("added-records") or 0)) for s in summaries[2:]]
    assert all(dvs > 0 or rows > 0 for dvs, rows in added), added
    assert any(dvs > 0 and rows == 0 for dvs, rows in added), added

    # A re-run of day 1 with other changes rebuilds days 1 and 2 from the bootstrap tag and re-publishes both.
    frames[DAY1] = changes_frame(spark, day1[: len(day1) // 2])
    rerun1 = merge_day(base, frames[DAY1], KEY, shard_column=SHARD).localCheckpoint()
    rerun2 = merge_day(rerun1, frames[DAY2], KEY, shard_column=SHARD)
    branch = "stage_2024_01_02_2"
    staged, main = ods_merge.stage_days(store, TABLE, branch, [DAY1, DAY2], changes_of, KEY, SHARD)
    with pytest.raises(StalePublishError, match="main moved"):
        ods_merge.publish(store, TABLE, branch, staged, main + 1)
    ods_merge.publish(store, TABLE, branch, staged, main)
    assert _stored(store, DAY1) == _comparable(collect_state(rerun1))
    assert _stored(store, DAY2) == _comparable(collect_state(rerun2))

    # A rollback moves main back to a day's tag; the later days are no longer published.
    assert ods_store.rollback_to_day(store, TABLE, DAY1) == [DAY2]
    assert ods_store.published_days(store, TABLE) == [BOOT, DAY1]
    latest = collect_state(ods_store.state_at(store, TABLE, "main"))
    assert _comparable(latest) == _comparable(collect_state(rerun1))
    with pytest.raises(LookupError, match="no published state of 2024-01-03"):
        ods_merge.predecessor(store, TABLE, "2024-01-04")

    # Day 2 again, now an ALTER TABLE ... ADD COLUMN with a default (every earlier row takes it) and a new row.
    where = {"table": "s0_t0", "file": "mysql-bin.1000001"}
    frames[DAY2] = changes_frame(
        spark,
        [
            change("ddl", 10, ddl="ALTER TABLE orders ADD COLUMN d int DEFAULT 7", **where),
            change("c", 11, after={"scn": 0, "id": 99, "a": "new", "d": 3}, **where),
        ],
    )
    altered = merge_day(rerun1, frames[DAY2], KEY, shard_column=SHARD)
    staged, main = ods_merge.stage_days(store, TABLE, "stage_2024_01_03_3", [DAY2], changes_of, KEY, SHARD)
    ods_merge.publish(store, TABLE, "stage_2024_01_03_3", staged, main)
    columns = [*COLUMNS, ("d", "int")]
    assert _stored(store, DAY2, columns) == _comparable(collect_state(altered), columns)
    assert _stored(store, DAY1) == _comparable(collect_state(rerun1))  # the older tag keeps its schema's rows


def _snapshots(store):
    table = store.java_table(ods_ref(TABLE))
    return sorted(table.snapshots(), key=lambda s: s.sequenceNumber())


def test_a_replay_is_told_by_positions(spark):
    """`_replayed`: the second read of the state's columns is skipped only when every live state row found is older
    than the oldest of the day's last setters; a tombstone, or an unknown setter position, never skips it wrongly."""
    found = spark.createDataFrame(
        [(1, 10, False), (2, 30, False), (3, 90, True)], f"id int, {SEQ} bigint, {DELETED} boolean"
    )
    assert not ods_merge._replayed(found, [31, 40])  # every setter newer than the newest live row (30)
    assert ods_merge._replayed(
        found, [30, 40]
    )  # a setter as old as a live row: `finalize` may keep its value
    assert ods_merge._replayed(found, [31, None])  # a column whose setters' positions are unknown
    assert not ods_merge._replayed(found.where(f"NOT {DELETED} AND id = 0"), [1])  # no live row found


def test_full_image_days_read_the_state_again_only_for_a_replay(spark, table_store):
    """Days of full images: the look reads the state's keys only. A replayed event older than the state's row
    leaves its columns to the state, so those rows are read again (the second read of `_touched_state`); a day
    with nothing older than the state skips that (`_replayed`). Both days equal the chain of `merge_day`."""
    store, table, where = table_store, "orders_replay", {"table": "t0"}

    def image(key: int, text: str) -> dict:
        return {"scn": 0, "id": key, "a": text, "b": key * 10, "c": key}

    base_rows = [
        {**image(1, "state"), "source_table": "t0", SEQ: seq_of(500), DELETED: False},
        {**image(2, "state"), "source_table": "t0", SEQ: seq_of(100), DELETED: False},
    ]
    base = state_frame(spark, base_rows, COLUMNS).localCheckpoint()
    frames = {
        DAY1: changes_frame(
            spark,
            [
                change(
                    "u", 300, before=image(1, "older"), after=image(1, "older"), **where
                ),  # older than the state
                change("u", 600, before=image(2, "state"), after=image(2, "newer"), **where),
                change("c", 700, after=image(3, "new"), **where),
            ],
        ),
        DAY2: changes_frame(
            spark, [change("u", 800, before=image(3, "new"), after=image(3, "later"), **where)]
        ),
    }
    state1 = merge_day(base, frames[DAY1], KEY, shard_column=SHARD).localCheckpoint()
    state2 = merge_day(state1, frames[DAY2], KEY, shard_column=SHARD).localCheckpoint()
    assert {r["id"]: r["a"] for r in collect_state(state1)} == {1: "state", 2: "newer", 3: "new"}

    ods_merge.write_state(store, table, BOOT, base, KEY, SHARD)
    for day, expected in ((DAY1, state1), (DAY2, state2)):
        branch = f"stage_replay_{day.replace('-', '_')}"
        staged, main = ods_merge.stage_days(
            store, table, branch, [day], lambda d: (frames[d], None), KEY, SHARD
        )
        ods_merge.publish(store, table, branch, staged, main)
        assert _stored(store, day, table=table) == _comparable(collect_state(expected)), day


@pytest.mark.parametrize("broadcast_max_rows", [1_000_000, 0])
def test_the_general_path_is_merge_day_restricted_to_the_day_keys(spark, broadcast_max_rows):
    """`day_rows` without the small-day path (`small_max_keys=0`), its look broadcast or not: the state's
    untouched rows plus its rows are `merge_day`'s result, row for row, over random days (partial images,
    deletes, key changes, replays). A day that deletes no key and touches no tombstone tells so (`tombstones`
    false: `ods_state` is not written); one that deletes tells the opposite."""
    base_rows, day1, day2 = _days(911)
    base = state_frame(spark, base_rows, COLUMNS).localCheckpoint()
    on = " AND ".join(f"b.`{k}` <=> r.`{k}`" for k in KEY)
    for changes in (changes_frame(spark, day1), changes_frame(spark, day1 + day2)):
        merged = ods_merge.day_rows(
            base, changes, KEY, shard_column=SHARD, small_max_keys=0, broadcast_max_rows=broadcast_max_rows
        )
        untouched = base.alias("b").join(merged.rows.alias("r"), F.expr(on), "left_anti")
        got = _comparable(collect_state(untouched.unionByName(merged.rows)))
        assert got == _comparable(collect_state(merge_day(base, changes, KEY, shard_column=SHARD)))
        assert merged.tombstones and merged.count == merged.rows.count()

    where = {"table": "t0"}
    fresh = changes_frame(spark, [change("c", 10**9, after={"scn": 99, "id": 99, "a": "new"}, **where)])
    merged = ods_merge.day_rows(base, fresh, KEY, shard_column=SHARD, small_max_keys=0)
    assert (merged.count, merged.live, merged.held, merged.tombstones) == (1, 1, 0, False)
