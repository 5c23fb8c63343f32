"""A day merged as its hours land (`cdc/ods/premerge.py`, issue 44) against `merge_day` of the whole day, row for
row: random days (partial images, deletes then re-inserts, key-changing updates, re-deliveries) pre-merged hour by
hour onto the pre-merge branch, then staged by the ODS stage (`ods_stage.stage`, the path of the ODS asset) with
only the last hour left; a re-landed hour, an hour with an older event than one merged before it, and a truncate
each make the day merge whole, with the same rows. Real Spark and Iceberg, one warehouse."""

from __future__ import annotations

import random

from pyspark.sql import functions as F

from sharp_dagster.cdc.landing.image_tables import write_typed_images
from sharp_dagster.cdc.merge.fold import merge_day
from sharp_dagster.cdc.ods import merge as ods_merge
from sharp_dagster.cdc.ods import stage as ods_stage
from sharp_dagster.cdc.ods import store as ods_store
from sharp_dagster.cdc.ods.premerge import (
    DAY_HOURS,
    RECORD,
    premerge_branch,
    premerge_hours,
    premerge_landed,
    read_record,
)
from sharp_dagster.cdc.ods.versions import day_tag, ods_ref
from sharp_dagster_tests.cdc.merge_reference import DELETED, SEQ, changes_frame, collect_state, state_frame
from sharp_dagster_tests.cdc.merge_scenarios import COLUMNS, KEY, scenario

SHARD = "source_table"
BOOT, DAY, NEXT = "2024-01-01", "2024-01-02", "2024-01-03"


def _day(seed: int, truncates: bool = False) -> tuple[list[dict], list[dict]]:
    """Base rows and a day of random changes over 12 scenarios, ordered by position (re-deliveries next to their
    event)."""
    base, events = [], []
    for scn in range(12):
        rows, found = scenario(scn, seed=seed + scn, sharded_truncates=truncates)
        base += rows
        events += found
    events.sort(key=lambda e: (int(e["binlog_seq"]), e["kafka_offset"]))
    return base, events


def _hours(events: list[dict], n: int) -> list[list[dict]]:
    """`events` cut into `n` hours in order, never between two events at the same position."""
    size = max(1, len(events) // n)
    hours, current = [], []
    for e in events:
        if len(current) >= size and len(hours) < n - 1 and e["binlog_seq"] != current[-1]["binlog_seq"]:
            hours.append(current)
            current = []
        current.append(e)
    return [*hours, current]


def _frame(spark, hours: list[list[dict]]):
    frames = [
        changes_frame(spark, rows).withColumn("hour", F.lit(f"{h:02d}"))
        for h, rows in enumerate(hours)
        if rows
    ]
    out = frames[0]
    for f in frames[1:]:
        out = out.unionByName(f)
    return out.localCheckpoint()


def _comparable(rows: list[dict]) -> list[tuple]:
    out = []
    for r in rows:
        if r[DELETED]:
            out.append((True, *(r[k] for k in KEY), r[SEQ]))
        else:
            out.append((False, *(r[c] for c, _ in COLUMNS), r[SEQ]))
    return sorted(out, key=lambda t: tuple((v is None, str(v)) for v in t))


def _stage_and_publish(store, table: str, branch: str, changes) -> list:
    """The day staged as the ODS asset stages it (`ods_stage.stage`), published; the ODS branch's history of
    pre-merge records (empty when the day was merged whole)."""
    staged = ods_stage.stage(store, table, branch, ([DAY], []), lambda _: (changes, None), KEY, SHARD)
    java = store.java_table(ods_ref(table))
    head = ods_store.ref_snapshot(store, ods_ref(table), branch)
    records = []
    while head is not None:
        snap = java.snapshot(head)
        if snap.summary().get(RECORD) is not None:
            records.append(str(snap.summary().get(RECORD)))
        head = snap.parentId()
    staged.publish(store)
    return records


def _stored(store, table: str) -> list[tuple]:
    return _comparable(collect_state(ods_store.state_at(store, table, day_tag(DAY))))


def _premerge(store, table: str, changes, upto: int):
    done = []
    out = None
    for h in range(upto):
        done.append(f"{h:02d}")
        out = premerge_hours(store, table, DAY, changes, done, KEY, SHARD)
    return out


def test_hour_by_hour_is_merge_day(spark, table_store):
    store = table_store
    for seed, table in ((910, "pm_a"), (911, "pm_b")):
        base_rows, events = _day(seed)
        base = state_frame(spark, base_rows, COLUMNS).localCheckpoint()
        hours = _hours(events, 4)
        changes = _frame(spark, hours)
        expected = _comparable(collect_state(merge_day(base, changes, KEY, shard_column=SHARD)))
        ods_merge.write_state(store, table, BOOT, base, KEY, SHARD)

        done = _premerge(store, table, changes, 3)  # hours 00..02 as they land; 03 is the day's last
        assert done.fallback is None and done.absorbed == ("00", "01", "02"), done
        assert [h for h, _ in read_record(store, table, DAY).hours] == ["00", "01", "02"]
        records = _stage_and_publish(store, table, f"stage_{DAY}_1", changes)

        assert records, "the day was not staged from its pre-merge branch"
        assert ods_store.ref_snapshot(store, ods_ref(table), premerge_branch(DAY)) is None  # dropped
        assert _stored(store, table) == expected, seed


def test_a_relanded_hour_an_older_event_or_a_truncate_merge_the_day_whole(spark, table_store):
    store = table_store
    base_rows, events = _day(920)
    base = state_frame(spark, base_rows, COLUMNS).localCheckpoint()
    hours = _hours(events, 4)

    # Hour 01 re-landed after it was pre-merged (an event less): the pre-merge no longer fits.
    ods_merge.write_state(store, "pm_reland", BOOT, base, KEY, SHARD)
    _premerge(store, "pm_reland", _frame(spark, hours), 3)
    relanded = _frame(spark, [hours[0], hours[1][:-1], *hours[2:]])
    records = _stage_and_publish(store, "pm_reland", f"stage_{DAY}_1", relanded)
    assert records == []
    want = merge_day(base, relanded, KEY, shard_column=SHARD)
    assert _stored(store, "pm_reland") == _comparable(collect_state(want))

    # Hour 02 holds a replay of an hour-00 event (older than hour 01's): recorded as not pre-mergeable.
    rng = random.Random(5)
    replayed = [*hours[:2], [*hours[2], *rng.sample(hours[0], 2)], hours[3]]
    changes = _frame(spark, replayed)
    ods_merge.write_state(store, "pm_replay", BOOT, base, KEY, SHARD)
    done = _premerge(store, "pm_replay", changes, 3)
    assert done.fallback and "hour 02" in done.fallback and done.absorbed == ("00", "01")
    assert _stage_and_publish(store, "pm_replay", f"stage_{DAY}_1", changes) == []
    want = merge_day(base, changes, KEY, shard_column=SHARD)
    assert _stored(store, "pm_replay") == _comparable(collect_state(want))

    # A day with truncates: the hour holding one stops the pre-merge.
    base_rows, events = _day(930, truncates=True)
    assert any(e["op"] == "t" for e in events)
    base = state_frame(spark, base_rows, COLUMNS).localCheckpoint()
    changes = _frame(spark, _hours(events, 4))
    ods_merge.write_state(store, "pm_trunc", BOOT, base, KEY, SHARD)
    done = _premerge(store, "pm_trunc", changes, 3)
    assert done.fallback and "truncate" in done.fallback
    assert _stage_and_publish(store, "pm_trunc", f"stage_{DAY}_1", changes) == []
    want = merge_day(base, changes, KEY, shard_column=SHARD)
    assert _stored(store, "pm_trunc") == _comparable(collect_state(want))


def test_the_landing_premerges_its_incomplete_days_from_the_typed_images(spark, table_store):
    """`premerge_landed`, what the landing asset calls after its done markers: the hours with a marker merged from
    the landing's typed images; a complete day is left to its own merge."""
    store = table_store
    base_rows, events = _day(940)
    hours = _hours(events, 4)
    raw = _frame(spark, hours[:3]).withColumn("table_name", F.lit("orders")).withColumn("dt", F.lit(DAY))
    write_typed_images(store, "shop", raw, ["orders"], known={"orders": COLUMNS})
    base = state_frame(spark, base_rows, COLUMNS).localCheckpoint()
    ods_merge.write_state(store, "orders", BOOT, base, KEY, SHARD)

    done = premerge_landed(store, "shop", "orders", DAY, ["00", "01"], KEY, SHARD)
    assert done.merged == ("00", "01") and done.fallback is None
    assert premerge_landed(store, "shop", "orders", DAY, ["00", "01", "02"], KEY, SHARD).merged == ("02",)
    assert (
        premerge_landed(store, "shop", "orders", DAY, DAY_HOURS, KEY, SHARD) is None
    )  # the day's merge's turn
    assert [h for h, _ in read_record(store, "orders", DAY).hours] == ["00", "01", "02"]
    assert premerge_landed(store, "shop", "nothing_landed", DAY, ["00"], KEY, SHARD) is None


def test_a_range_merges_its_days_whole_and_drops_their_premerge_branches(spark, table_store):
    """A range (or a re-run) merges its days whole: a pre-merge branch of one of them is dropped with the stage,
    not left behind, and the day's rows are still `merge_day`'s."""
    store = table_store
    base_rows, events = _day(950)
    base = state_frame(spark, base_rows, COLUMNS).localCheckpoint()
    changes = _frame(spark, _hours(events, 4))
    ods_merge.write_state(store, "pm_range", BOOT, base, KEY, SHARD)
    _premerge(store, "pm_range", changes, 3)
    branches = [
        ods_store.ref_snapshot(store, ref, premerge_branch(DAY)) for ref in ods_store.both("pm_range")
    ]
    assert None not in branches, "nothing was pre-merged"

    quiet = changes.limit(0)
    staged = ods_stage.stage(
        store,
        "pm_range",
        "stage_range_1",
        ([DAY, NEXT], []),
        lambda day: (changes if day == DAY else quiet, None),
        KEY,
        SHARD,
    )
    assert [
        ods_store.ref_snapshot(store, ref, premerge_branch(DAY)) for ref in ods_store.both("pm_range")
    ] == [
        None,
        None,
    ]
    staged.publish(store)
    assert _stored(store, "pm_range") == _comparable(
        collect_state(merge_day(base, changes, KEY, shard_column=SHARD))
    )
