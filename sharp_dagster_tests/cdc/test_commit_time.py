"""Days and hours are cut where transactions commit: a transaction spanning midnight lands in its commit hour, and
an hour marked done while a transaction that began in it is still open never gains a row later."""

from __future__ import annotations

import datetime as dt

from sharp_dagster.cdc.landing.done_markers import hours_done, hours_to_mark, write_done_markers
from sharp_dagster.cdc.landing.land import land
from sharp_dagster.cdc.landing.raw_tables import raw_table_ref

D = dt.datetime(2024, 3, 1, tzinfo=dt.UTC)
LATENESS = 15


def at(hour: int, minute: int, second: int = 0, day: int = 0) -> int:
    """Epoch seconds of day D (+ `day`) at the time given."""
    return int((D + dt.timedelta(days=day, hours=hour, minutes=minute, seconds=second)).timestamp())


def test_transactions_spanning_midnight_land_in_their_commit_hour(cdc, spark, table_store):
    db = cdc.new_database("commit")
    # The collector starts after CREATE DATABASE, which ran at the real clock, years after the simulated day: a
    # heartbeat sent at a checkpoint says "everything up to the last commit read is sent", and the last commit
    # read would be that one, marking every hour up to today done. That heartbeat is due at the first checkpoint,
    # which comes whenever a commit is read more than flush_interval_s after the run began: under load, it did.
    # flush_interval_s=0 below makes that checkpoint certain, so the test no longer depends on the machine's load.
    start = cdc.gtid_pos()
    cdc.sql(db, f"SET timestamp = {at(22, 0)}", "CREATE TABLE user_info_1 (id INT PRIMARY KEY, v INT)")
    cdc.sql(db, f"SET timestamp = {at(23, 55)}", "INSERT INTO user_info_1 VALUES (4, 4)")
    long_open = cdc.mariadb.connect(db)  # began at 23:50 on D, commits at 01:30 on D+1
    try:
        with long_open.cursor() as cur:
            for sql in (f"SET timestamp = {at(23, 50)}", "BEGIN", "INSERT INTO user_info_1 VALUES (1, 1)"):
                cur.execute(sql)
        # Committing seconds after midnight, then minutes after it.
        cdc.sql(
            db,
            f"SET timestamp = {at(23, 59, 58)}",
            "BEGIN",
            "INSERT INTO user_info_1 VALUES (2, 2)",
            f"SET timestamp = {at(0, 0, 3, day=1)}",
            "COMMIT",
        )
        cdc.sql(
            db,
            f"SET timestamp = {at(23, 58)}",
            "BEGIN",
            "INSERT INTO user_info_1 VALUES (3, 3)",
            "UPDATE user_info_1 SET v = 40 WHERE id = 4",
            f"SET timestamp = {at(0, 7, day=1)}",
            "COMMIT",
        )
        source = cdc.config(db, partitions=2, lateness=LATENESS)
        topic, rules = f"binlog.{db}", source.databases[0].shard_rules
        landing = Landing(spark, table_store, cdc, topic, rules, db)

        # The source's clock at 00:20 on D+1, the transaction that began at 23:50 still open.
        first = cdc.collector(source, start=start, clock=lambda: at(0, 20, day=1) * 1000, flush_interval_s=0)
        first.run(once=True)
        marked = landing.run()
        assert ("2024-03-01", "23") in marked and len(
            hours_done(table_store.warehouse_dir, db, "2024-03-01")
        ) == 24
        assert landing.placed() == {
            ("c", "4"): ("2024-03-01", "23"),
            ("c", "2"): ("2024-03-02", "00"),  # 5 s after its statement, over midnight
            ("c", "3"): ("2024-03-02", "00"),  # 9 min after
            ("u", "4"): ("2024-03-02", "00"),  # the update ran at 23:58 on D, committed on D+1
        }
        assert hours_done(table_store.warehouse_dir, db, "2024-03-02") == []  # 00:20 < 01:00 + 15 min
        hour_23 = landing.uids("2024-03-01", "23")

        with long_open.cursor() as cur:
            for sql in (
                f"SET timestamp = {at(1, 30, day=1)}",
                "INSERT INTO user_info_1 VALUES (5, 5)",
                "COMMIT",
            ):
                cur.execute(sql)
    finally:
        long_open.close()
    cdc.collector(source, clock=lambda: at(1, 40, day=1) * 1000).run(once=True)
    landing.run()
    # Hour 01 of D+1, where the transaction committed, is not done (01:40 < 02:15); hour 23 of D was.
    assert "01" not in hours_done(table_store.warehouse_dir, db, "2024-03-02")
    placed = landing.placed()
    # Its first statement ran at 23:50 on D, in an hour marked done since: the whole transaction is D+1's.
    assert placed[("c", "1")] == placed[("c", "5")] == ("2024-03-02", "01")
    assert landing.uids("2024-03-01", "23") == hour_23
    messages = [m for m in cdc.changes(topic) if m["type"] == "INSERT"]
    by_id = {m["data"][0]["id"]: m for m in messages}
    assert by_id["1"]["es"] == at(23, 50) * 1000 and by_id["1"]["commitTs"] == at(1, 30, day=1) * 1000
    assert all(m["commitTs"] >= m["es"] for m in messages)


class Landing:
    """The landing runs of one topic, carrying offsets, watermarks and the first commit seen as the job log does."""

    def __init__(self, spark, store, cdc, topic, rules, db):
        self.spark, self.store, self.cdc, self.topic, self.rules, self.db = (
            spark,
            store,
            cdc,
            topic,
            rules,
            db,
        )
        self.offsets = self.watermarks = self.first_seen = self.low = None

    def run(self) -> list[tuple[str, str]]:
        result = land(
            self.spark,
            self.store,
            self.cdc.kafka,
            self.topic,
            self.offsets,
            "latest",
            self.rules,
            database=self.db,
            prior_watermarks=self.watermarks,
        )
        seen = [x for x in (self.first_seen, result.first_seen_ms) if x is not None]
        self.first_seen = min(seen)
        marked = write_done_markers(
            self.store.warehouse_dir,
            self.db,
            result.low_watermark_ms,
            LATENESS,
            self.first_seen,
            prior_low_watermark_ms=self.low,
        )
        self.offsets, self.watermarks, self.low = (
            result.end_offsets,
            result.watermarks_ms,
            result.low_watermark_ms,
        )
        return marked

    def rows(self) -> list:
        ref = raw_table_ref(self.db)
        return self.store.read_partitions(ref, self.store.list_partitions(ref)).collect()

    def placed(self) -> dict[tuple[str, str], tuple[str, str]]:
        import json

        out = {}
        for r in self.rows():
            if r.op in ("c", "u"):
                out[(r.op, json.loads(r.after_json)["id"])] = (r.dt, r.hour)
        return out

    def uids(self, day: str, hour: str) -> set[str]:
        return {r.event_uid for r in self.rows() if (r.dt, r.hour) == (day, hour)}


def test_hours_to_mark_covers_quiet_first_hours_and_resumes_after_the_last_watermark():
    day = at(0, 0) * 1000
    hour = 3_600_000
    late = LATENESS * 60_000
    # First commit seen at 05:10: the quiet hours 00..04 of its day are marked too.
    assert hours_to_mark(day + 7 * hour + late, LATENESS, day + 5 * hour + 600_000) == [
        day + h * hour for h in range(7)
    ]
    # Nothing seen yet, or no watermark: nothing.
    assert hours_to_mark(day + 7 * hour, LATENESS, None) == []
    assert hours_to_mark(None, LATENESS, day) == []
    # After a watermark of 03:20 on D+2 (hours up to 01 of D+2 marked), a new run checks from D+2's start only.
    prior = day + 2 * 24 * hour + 3 * hour + 20 * 60_000
    assert hours_to_mark(prior + hour, LATENESS, day, prior) == [
        day + 2 * 24 * hour + h * hour for h in range(4)
    ]
