"""Acceptance: MariaDB row binlog -> collector -> broker -> hourly landing -> checkdone -> daily merge = the source.

Engine level (no Dagster), with the CDC session's real MariaDB and Kafka broker and the session's Spark. The shop
database (`sharp_dagster.demo.shop`: user_info sharded into user_info_0..3, product, orders, order_item) gets an
initial state and a snapshot bootstrap, then two days of changes (inserts, updates, primary-key changes, deletes,
a delete + re-insert, NULLs, a cross-table transaction, and on day 2 an `ALTER TABLE ... ADD COLUMN`). After each
day the collector runs (`--once`), the landing lands the topic with offsets and watermarks carried from run to run
as the job log keeps them, the done markers are written, and, when the day is complete, each logical table is
merged; the published ODS table must equal the source table at the end of that day, row by row, every column.
Day 2 runs the collector as a process that is SIGKILLed mid-stream and restarted; an already landed range is
landed again; a third day that has only partly landed is not merged; bad records are quarantined.

Simulated time. Changes are put on 2024-01-01..03 with `SET timestamp` (MariaDB then uses that value for NOW()
and as the binlog event time). When the collector has caught up it sends heartbeats stamped with the source
server's clock (`source_clock.SourceClock`); the server's real clock is years ahead of the simulated days, and
`SET timestamp` is per session, so the collector is given a clock reading the simulated time instead: in process
as its `clock` argument, in the subprocess by a `sitecustomize` that replaces `SourceClock.__call__` (the command
itself is the plain `python -m sharp_dagster.cli.cdc`). test_collector.py checks that the real `SourceClock`
reads the server, whatever the collector host's clock says.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sharp_dagster.cdc.capture.collector import Collector, CollectStats
from sharp_dagster.cdc.capture.collector_db import DbStateStore, saved_position
from sharp_dagster.cdc.change import binlog_schema as bs
from sharp_dagster.cdc.change.messages import BinlogMessage, encode
from sharp_dagster.cdc.landing.done_markers import day_complete, hours_done, write_done_markers
from sharp_dagster.cdc.landing.image_tables import read_typed_images
from sharp_dagster.cdc.landing.land import LandingResult, land
from sharp_dagster.cdc.landing.raw_tables import quarantine_table_ref, raw_table_ref
from sharp_dagster.cdc.merge.fold import initial_state, merge_day, merge_key
from sharp_dagster.cdc.merge.result import SEQ_COLUMN
from sharp_dagster.cdc.ods import merge as ods_merge
from sharp_dagster.cdc.ods import stage as ods_stage
from sharp_dagster.cdc.ods import store as ods_store
from sharp_dagster.cdc.ods.columns import state_columns
from sharp_dagster.cdc.ods.snapshot import read_binlog_position, snapshot_table
from sharp_dagster.cdc.source.config import PASSWORD_ENV, MysqlSettings, SourceConfig, source_config_from_dict
from sharp_dagster.demo.shop import SOURCE_DB, TABLES, shard_of_user
from sharp_dagster_tests.cdc.source_support import SimulatedClock, sort_rows, text

pytestmark = pytest.mark.slow

USER, PASSWORD = "cdc_e2e", "e2e-Pw-9731"
SOURCE_ID = "shop-mariadb"
LATENESS_MIN = 15
HOUR_MS, DAY_MS = 3_600_000, 86_400_000
SNAPSHOT_DT, DAY1, DAY2, DAY3 = "2023-12-31", "2024-01-01", "2024-01-02", "2024-01-03"
SHARD_COLUMN = "source_table"

SITECUSTOMIZE = '''"""Test clock: the source's clock reads the simulated time (see test_end_to_end.py)."""
import os
import time

from sharp_dagster.cdc.source.clock import SourceClock

_offset = float(os.environ["SHARP_E2E_CLOCK_OFFSET_S"])
SourceClock.__call__ = lambda self: int((time.time() + _offset) * 1000)
'''


def at(day: str, hour: int, minute: int = 0, second: int = 0) -> dt.datetime:
    return dt.datetime.fromisoformat(day).replace(hour=hour, minute=minute, second=second, tzinfo=dt.UTC)


def ms(when: dt.datetime) -> int:
    return int(when.timestamp() * 1000)


def expected_done_hours(day: str, clock: dt.datetime) -> list[str]:
    """The hours of `day` a watermark at `clock` makes done: hour end + lateness <= watermark."""
    lateness = dt.timedelta(minutes=LATENESS_MIN)
    return [f"{h:02d}" for h in range(24) if at(day, h) + dt.timedelta(hours=1) + lateness <= clock]


def gtid_seq(gtid: str) -> int:
    return int(gtid.rsplit("-", 1)[1])


# ---------------------------------------------------------------------------------------------------- the source
class Source:
    """The shop's application: statements at simulated times, with what they changed counted per day."""

    def __init__(self, mariadb):
        self.mariadb = mariadb
        self.conn = mariadb.connect(SOURCE_DB)
        with self.conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")  # NOW() in UTC, the zone of the binlog event times
        self.row_changes: Counter[str] = Counter()  # day -> rows inserted, updated or deleted
        self.ddl: Counter[str] = Counter()  # day -> DDL statements on captured tables
        self.event_times: dict[str, set[int]] = defaultdict(set)  # day -> binlog event times (ms)

    def at(self, when: dt.datetime, *statements: str) -> None:
        day = when.strftime("%Y-%m-%d")
        with self.conn.cursor() as cur:
            cur.execute("SET timestamp = %s", (int(when.timestamp()),))
            for sql in statements:
                cur.execute(sql)
                head = sql.lstrip().split(None, 1)[0].upper()
                if head in ("INSERT", "UPDATE", "DELETE"):
                    # Every statement changes rows: a no-op would make the event-time checks say nothing.
                    assert cur.rowcount >= 1, f"statement changed nothing: {sql}"
                    self.row_changes[day] += cur.rowcount
                    self.event_times[day].add(ms(when))
                elif head == "ALTER":
                    self.ddl[day] += 1
                    self.event_times[day].add(ms(when))

    def gtid_pos(self) -> str:
        with self.conn.cursor() as cur:
            cur.execute("SELECT @@GLOBAL.gtid_binlog_pos")
            return cur.fetchone()[0]

    def content(self, name: str) -> tuple[list[str], list[tuple]]:
        """(columns, rows as text) of a logical table now; a sharded table's rows carry their shard."""
        table = TABLES[name]
        sharded = table.shard_regex is not None
        columns: list[str] = []
        rows: list[tuple] = []
        with self.conn.cursor() as cur:
            for shard in table.shards:
                cur.execute(f"SELECT * FROM `{shard}`")
                columns = ([SHARD_COLUMN] if sharded else []) + [d[0] for d in cur.description]
                prefix = (shard,) if sharded else ()
                rows += [prefix + tuple(text(v) for v in r) for r in cur.fetchall()]
        return columns, sort_rows(rows)

    def close(self) -> None:
        self.conn.close()


def create_shop(mariadb) -> None:
    mariadb.execute(f"DROP DATABASE IF EXISTS {SOURCE_DB}", f"CREATE DATABASE {SOURCE_DB}")
    mariadb.execute(*[t.mysql_ddl(shard) for t in TABLES.values() for shard in t.shards], database=SOURCE_DB)


def initial_rows(source: Source) -> None:
    when = at(SNAPSHOT_DT, 12)
    cities = ["Beijing", "Shanghai", "Shenzhen", "Guangzhou"]
    by_shard: dict[str, list[str]] = defaultdict(list)
    for uid in range(1, 17):
        by_shard[shard_of_user(uid)].append(
            f"({uid}, 'user{uid}', '{cities[uid % 4]}', 'silver', '2023-06-{uid:02d} 08:00:00', NOW())"
        )
    source.at(when, *[f"INSERT INTO {shard} VALUES {', '.join(v)}" for shard, v in sorted(by_shard.items())])
    categories = ["book", "toy", "food"]
    products = [f"({p}, 'product{p}', '{categories[p % 3]}', {p * 3}.99, NOW())" for p in range(1, 11)]
    orders = [
        f"({o}, {o % 16 + 1}, 'paid', '2023-12-{10 + o:02d} 09:30:00', {o * 10}.50, NOW())"
        for o in range(1, 13)
    ]
    items = [f"({i}, {i % 12 + 1}, {i % 10 + 1}, {i % 3 + 1}, {i}.25)" for i in range(1, 21)]
    source.at(
        when,
        f"INSERT INTO product VALUES {', '.join(products)}",
        f"INSERT INTO orders VALUES {', '.join(orders)}",
        f"INSERT INTO order_item VALUES {', '.join(items)}",
    )


def day1_changes(s: Source) -> None:
    d = DAY1
    s.at(
        at(d, 1, 10),
        "INSERT INTO user_info_1 VALUES (17, 'user17', 'Wuhan', 'bronze', NOW(), NOW())",
        "INSERT INTO user_info_2 VALUES (18, 'user18', 'Nanjing', 'bronze', NOW(), NOW())",
        "INSERT INTO user_info_3 VALUES (19, 'user19', NULL, 'bronze', NOW(), NOW())",
        "INSERT INTO user_info_0 VALUES (20, 'user20', 'Xiamen', 'bronze', NOW(), NOW())",
    )
    s.at(
        at(d, 1, 40),
        "UPDATE user_info_2 SET city = 'Hangzhou', updated_at = NOW() WHERE user_id = 2",
        "UPDATE user_info_1 SET level = 'gold', updated_at = NOW() WHERE user_id IN (1, 5)",  # two rows, one event
    )
    s.at(
        at(d, 5, 0),
        # Primary-key changes: a user within its shard, an order (and its items follow), two items in one event.
        "UPDATE user_info_1 SET user_id = 21, updated_at = NOW() WHERE user_id = 9",
        "UPDATE orders SET order_id = 100, updated_at = NOW() WHERE order_id = 4",
        "UPDATE order_item SET order_id = 100 WHERE order_id = 4",
        "UPDATE order_item SET item_id = item_id + 1000 WHERE item_id IN (1, 2)",
    )
    s.at(
        at(d, 5, 30),
        "DELETE FROM user_info_3 WHERE user_id = 3",
        "DELETE FROM user_info_0 WHERE user_id = 20",  # inserted the same day
        "DELETE FROM product WHERE product_id = 10",
        "DELETE FROM order_item WHERE item_id = 20",
    )
    s.at(
        at(d, 9, 0),
        "BEGIN",
        "INSERT INTO orders VALUES (13, 17, 'paid', NOW(), 59.90, NOW())",
        "INSERT INTO order_item VALUES (21, 13, 1, 2, 3.99), (22, 13, 2, 1, 6.99)",
        "UPDATE product SET price = 4.49, updated_at = NOW() WHERE product_id = 1",
        "COMMIT",
    )
    s.at(
        at(d, 13, 0),
        "UPDATE orders SET order_status = 'shipped', updated_at = NOW() WHERE order_id IN (1, 2, 3)",
        "DELETE FROM user_info_2 WHERE user_id = 6",
        "INSERT INTO user_info_2 VALUES (6, 'user6-again', 'Xian', 'bronze', NOW(), NOW())",
    )
    s.at(
        at(d, 18, 0),
        "UPDATE user_info_3 SET city = NULL, updated_at = NOW() WHERE user_id = 7",
        "UPDATE product SET category = NULL WHERE product_id = 3",
        "INSERT INTO product VALUES (11, 'product11', 'toy', 20.00, NOW())",
        "UPDATE product SET price = 21.50 WHERE product_id = 11",
        "UPDATE product SET price = 22.75, updated_at = NOW() WHERE product_id = 11",
    )
    s.at(
        at(d, 23, 50),
        "UPDATE user_info_0 SET level = 'gold', updated_at = NOW() WHERE user_id = 4",
        "UPDATE orders SET total_amount = total_amount + 1 WHERE order_id = 100",
    )


def day2_changes(s: Source) -> None:
    d = DAY2
    s.at(
        at(d, 1, 5),
        "UPDATE user_info_1 SET level = 'vip', updated_at = NOW() WHERE user_id = 17",
        "UPDATE user_info_1 SET city = 'Suzhou', updated_at = NOW() WHERE user_id = 21",
    )
    s.at(at(d, 1, 30), "UPDATE user_info_1 SET user_id = 25, updated_at = NOW() WHERE user_id = 21")
    s.at(
        at(d, 4, 0),
        "DELETE FROM user_info_1 WHERE user_id = 1",
        "DELETE FROM user_info_2 WHERE user_id = 2",
        "DELETE FROM orders WHERE order_id = 5",
        # Before the ALTER: these rows get the new column's default from MySQL, and must in the ODS too.
        "UPDATE product SET price = 9.99 WHERE product_id = 4",
        "INSERT INTO product VALUES (13, 'product13', 'book', 7.00, NOW())",
    )
    s.at(at(d, 6, 0), "ALTER TABLE product ADD COLUMN stock INT NOT NULL DEFAULT 10")
    s.at(
        at(d, 6, 30),
        "INSERT INTO product VALUES (12, 'product12', 'toy', 15.00, NOW(), 5)",
        "UPDATE product SET stock = 3, updated_at = NOW() WHERE product_id = 1",
    )
    s.at(
        at(d, 8, 0),
        "INSERT INTO orders VALUES (14, 18, 'paid', NOW(), 120.50, NOW())",
        "UPDATE orders SET order_id = 200, updated_at = NOW() WHERE order_id = 100",
        "UPDATE order_item SET order_id = 200 WHERE order_id = 100",
    )
    s.at(
        at(d, 10, 0),
        "INSERT INTO order_item VALUES (23, 14, 12, 4, 15.00)",
        "UPDATE order_item SET quantity = quantity + 1 WHERE item_id = 21",
        "DELETE FROM order_item WHERE item_id = 1001",
        "INSERT INTO user_info_3 VALUES (3, 'user3-back', 'Chengdu', 'silver', NOW(), NOW())",  # deleted on day 1
    )
    # Many small transactions, so that the collector process can be killed in the middle of the day's stream.
    orders = [1, 2, 3, 6, 7, 8, 9, 10, 11, 12, 13, 14]
    users = [4, 5, 6, 7, 8, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 25]
    for i in range(360):
        when = at(d, 14) + dt.timedelta(seconds=20 * i)
        if i % 3 == 0:
            sql = (
                f"UPDATE product SET price = price + 0.01, updated_at = NOW() WHERE product_id = {1 + i % 9}"
            )
        elif i % 3 == 1:
            sql = f"UPDATE orders SET total_amount = total_amount + 0.10 WHERE order_id = {orders[i % 12]}"
        else:
            uid = users[i % 16]
            sql = f"UPDATE {shard_of_user(uid)} SET level = 'L{i}', updated_at = NOW() WHERE user_id = {uid}"
        s.at(when, sql)
    s.at(
        at(d, 23, 55),
        "UPDATE orders SET order_status = 'done', updated_at = NOW() WHERE order_id = 1",
        "UPDATE product SET stock = stock - 1 WHERE product_id = 12",
    )


def day3_changes(s: Source) -> None:
    d = DAY3
    s.at(at(d, 1, 0), "INSERT INTO user_info_2 VALUES (26, 'user26', 'Harbin', 'bronze', NOW(), NOW())")
    s.at(at(d, 3, 0), "UPDATE product SET stock = 0 WHERE product_id = 2")
    s.at(at(d, 5, 0), "DELETE FROM orders WHERE order_id = 6")


# ---------------------------------------------------------------------------------------------------- the pipeline
def config_dict(topic: str) -> dict[str, Any]:
    tables = []
    for t in TABLES.values():
        entry: dict[str, Any] = {"name": t.name, "primary_key": list(t.primary_key)}
        if t.shard_regex:
            entry["shard_regex"] = t.shard_regex
        tables.append(entry)
    return {
        "source_id": SOURCE_ID,
        "replica_server_id": 7101,
        "lateness_minutes": LATENESS_MIN,
        "topic_partitions": 2,
        "databases": [{"name": SOURCE_DB, "topic": topic, "tables": tables}],
    }


@dataclass
class JobLog:
    """What the landing job keeps between runs: offsets, watermarks, the first event time, and every result."""

    offsets: dict[int, int] | None = None
    watermarks: dict[int, int | None] | None = None
    first_event_ts_ms: int | None = None
    runs: list[LandingResult] = field(default_factory=list)


@dataclass
class Pipeline:
    cdc: Any
    spark: Any
    store: Any
    tmp_path: Path
    source: Source
    config: dict[str, Any]
    mysql: MysqlSettings
    start_gtid: str
    log: JobLog = field(default_factory=JobLog)
    # (dt, hour) -> event_uids of the raw rows of that hour when its done marker was first seen
    done_hour_uids: dict[tuple[str, str], set[str]] = field(default_factory=dict)

    @property
    def topic(self) -> str:
        return self.config["databases"][0]["topic"]

    @property
    def source_config(self) -> SourceConfig:
        return source_config_from_dict(self.config)

    @property
    def rules(self):
        return self.source_config.databases[0].shard_rules

    @property
    def position_db(self) -> str:
        """The job-log database the collector keeps its resume position in, in process and as a command."""
        return f"sqlite:///{self.tmp_path / 'collector_log.db'}"

    @property
    def warehouse(self) -> str:
        return self.store.warehouse_dir

    # ------------------------------------------------------------------ collector
    def collect_in_process(self, clock: dt.datetime) -> CollectStats:
        collector = Collector(
            self.mysql,
            {"bootstrap.servers": self.cdc.broker.bootstrap_servers},
            self.source_config,
            DbStateStore(self.position_db, self.source_config.source_id),
            start=self.start_gtid,
            clock=SimulatedClock(clock),
        )
        stats = collector.run(once=True)
        assert stats.stopped_by == "eof"
        return stats

    def collect_command(self, *extra: str) -> list[str]:
        config = self.tmp_path / "source.yaml"
        config.write_text(yaml.safe_dump(self.config))
        return [
            sys.executable,
            "-m",
            "sharp_dagster.cli.cdc",
            "collect",
            "--config",
            str(config),
            "--host",
            self.mysql.host,
            "--port",
            str(self.mysql.port),
            "--user",
            USER,
            "--bootstrap-servers",
            self.cdc.broker.bootstrap_servers,
            "--start",
            self.start_gtid,
            "--once",
            *extra,
        ]

    def collect_env(self, clock: dt.datetime) -> dict[str, str]:
        clock_dir = self.tmp_path / "clock"
        clock_dir.mkdir(exist_ok=True)
        (clock_dir / "sitecustomize.py").write_text(SITECUSTOMIZE)
        path = os.pathsep.join(p for p in (str(clock_dir), os.environ.get("PYTHONPATH", "")) if p)
        return {
            **os.environ,
            PASSWORD_ENV: PASSWORD,
            "SHARP_LOG_DB_URL": self.position_db,
            "PYTHONPATH": path,
            "SHARP_E2E_CLOCK_OFFSET_S": repr(clock.timestamp() - time.time()),
        }

    def saved_gtid(self) -> str | None:
        try:
            state = saved_position(self.position_db, self.source_config.source_id)
        except Exception:  # the schema being created
            return None
        return state.gtid_pos if state else None

    # ------------------------------------------------------------------ landing
    def land_hourly(self) -> tuple[LandingResult, list[tuple[str, str]]]:
        """One run of the hourly landing job: land from the logged offsets, write done markers, log the result."""
        result = land(
            self.spark,
            self.store,
            {"bootstrap.servers": self.cdc.broker.bootstrap_servers},
            self.topic,
            self.log.offsets,
            "latest",
            self.rules,
            database=SOURCE_DB,
            prior_watermarks=self.log.watermarks,
            # Typed as the landing asset types them: by the ODS states' columns (`cdc/ods/columns.state_columns`).
            image_columns=state_columns(self.store, self.source_config.databases[0].tables),
        )
        known = [x for x in (self.log.first_event_ts_ms, result.min_event_ts_ms) if x is not None]
        first = min(known) if known else None
        markers: list[tuple[str, str]] = []
        if first is not None:
            markers = write_done_markers(
                self.warehouse, SOURCE_DB, result.low_watermark_ms, LATENESS_MIN, first - first % DAY_MS
            )
        self.log.offsets, self.log.watermarks = dict(result.end_offsets), dict(result.watermarks_ms)
        self.log.first_event_ts_ms = first
        self.log.runs.append(result)
        # A done hour must never gain a row later: remember what it holds now, check it at the end.
        for day in sorted({d for d, _ in markers}):
            rows = self.raw_rows(day)
            for hour in [h for d, h in markers if d == day]:
                self.done_hour_uids[(day, hour)] = {r.event_uid for r in rows if r.hour == hour}
        return result, markers

    def raw_partitions(self, day: str, table: str | None = None) -> list[dict[str, str]]:
        return [
            p
            for p in self.store.list_partitions(raw_table_ref(SOURCE_DB))
            if p["dt"] == day and (table is None or p["table_name"] == table)
        ]

    def raw_rows(self, day: str) -> list:
        parts = self.raw_partitions(day)
        if not parts:
            return []
        df = self.store.read_partitions(raw_table_ref(SOURCE_DB), parts)
        return df.select("event_uid", "event_ts_ms", "op", "table_name", "dt", "hour").collect()

    def changes(self, table: str, day: str) -> DataFrame:
        """The changes of one logical table and day as the daily merge reads them: the landing's typed images,
        which hold every raw binlog row of the day (the raw rows are the merge's input only without them)."""
        parts = self.raw_partitions(day, table)
        if not parts:
            return self.spark.createDataFrame([], bs.raw_binlog_ddl_schema())
        raw = self.store.read_partitions(raw_table_ref(SOURCE_DB), parts)
        typed = read_typed_images(self.store, SOURCE_DB, table, day)
        assert typed is not None and typed.count() == raw.count(), f"{table} {day}: typed images incomplete"
        return typed

    # ------------------------------------------------------------------ merge
    def read_day(self, name: str, day: str) -> DataFrame:
        """The published rows of `day`: `ods.<table> VERSION AS OF '<day>'` (a tag reads with the schema of its
        snapshot: a column added by a later day is not there), without the merge's `_binlog_seq`."""
        return ods_store.read_version(self.store, ods_name(name), day).drop(SEQ_COLUMN)

    def key(self, name: str) -> tuple[list[str], str | None]:
        """The merge key and shard column of a logical table, as the ODS asset takes them."""
        table_config = self.source_config.databases[0].table(name)
        shard = SHARD_COLUMN if TABLES[name].shard_regex is not None else None
        key = merge_key(table_config.primary_key, shard_column=shard, business_key=table_config.business_key)
        return key, shard

    def bootstrap(self, snapshots: dict[str, DataFrame], seq: int) -> None:
        for name, snap in snapshots.items():
            if TABLES[name].shard_regex is None:
                snap = snap.drop(SHARD_COLUMN)
            key, shard = self.key(name)
            ods_merge.write_state(
                self.store, ods_name(name), SNAPSHOT_DT, initial_state(snap, seq), key, shard
            )

    def merged(self, name: str, day: str, base: DataFrame) -> DataFrame:
        """`merge_day` of the day's changes onto `base` (the pure fold the stored days must agree with)."""
        key, shard = self.key(name)
        return merge_day(base, self.changes(name, day), key, shard_column=shard)

    def merge_if_complete(self, day: str) -> bool:
        """The daily merge step, as the ODS asset stages and publishes it (`ods_stage`): refuses (False) unless
        checkdone says every hour of `day` has landed."""
        if not day_complete(self.warehouse, SOURCE_DB, day):
            return False
        for name in TABLES:
            key, shard = self.key(name)
            table = ods_name(name)
            later = ods_stage.later_days(self.store, table, day)
            branch = f"stage_{day.replace('-', '_')}_{uuid.uuid4().hex[:8]}"
            staged = ods_stage.stage(
                self.store,
                table,
                branch,
                ([day], later),
                lambda d, n=name: (self.changes(n, d), None),
                key,
                shard,
            )
            staged.publish(self.store)
        return True

    def ods_content(self, name: str, day: str, state: bool = False) -> tuple[list[str], list[tuple]]:
        """The published rows of `day` (or, with `state`, the merge's whole state then: tombstones too)."""
        df = ods_store.state_at(self.store, ods_name(name), day) if state else self.read_day(name, day)
        return sorted(df.columns), sort_rows(
            [
                tuple(r)
                for r in df.select(*[F.col(f"`{c}`").cast("string") for c in sorted(df.columns)]).collect()
            ]
        )

    def assert_ods_equals(self, day: str, expected: dict[str, tuple[list[str], list[tuple]]]) -> None:
        for name, (columns, rows) in expected.items():
            df = self.read_day(name, day)
            assert sorted(df.columns) == sorted(columns), f"ods {name} {day}: columns differ"
            got = sort_rows(
                [tuple(r) for r in df.select(*[F.col(f"`{c}`").cast("string") for c in columns]).collect()]
            )
            assert got == rows, f"ods {name} {day} differs from the source"

    def assert_no_merge_output(self, day: str) -> None:
        for name in TABLES:
            assert day not in ods_store.published_days(self.store, ods_name(name)), f"ods.{name} has {day}"
            for ref in ods_store.both(ods_name(name)):
                assert self.store.staged_branches(ref) == {}, f"{ref.qualified}: a staging branch was left"


def ods_name(name: str) -> str:
    """The ODS table of logical table `name` in this test (`ods.<db>_<name>`: its own, in the session warehouse)."""
    return f"{SOURCE_DB}_{name}"


def wait_for(predicate, timeout: float, what: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if proc.poll() is not None:
            _out, err = proc.communicate()
            raise AssertionError(f"collector exited ({proc.returncode}) before {what}: {err[-2000:]}")
        time.sleep(0.005)
    raise AssertionError(f"timed out waiting for {what}")


def bad_records(binlog_file: str, when: dt.datetime) -> list[tuple[int, bytes]]:
    """Three records the landing must quarantine: not JSON, no binlog identity, an unknown table."""

    def message(table: str) -> dict:
        return json.loads(
            encode(
                BinlogMessage(
                    type="INSERT",
                    source_id=SOURCE_ID,
                    database=SOURCE_DB,
                    table=table,
                    event_ts_ms=ms(when),
                    binlog_file=binlog_file,
                    binlog_pos=4,
                    pk_names=["user_id"],
                    data={"user_id": "999", "user_name": "ghost"},
                )
            )
        )

    no_identity = message("user_info_1")
    del no_identity["binlogFile"], no_identity["binlogPos"]
    return [
        (0, b"\x00{not json"),
        (1, json.dumps(no_identity).encode()),
        (0, json.dumps(message("accounts")).encode()),
    ]


# ---------------------------------------------------------------------------------------------------- the test
def test_binlog_to_ods_end_to_end(cdc, spark, table_store, tmp_path):
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    cdc.mariadb.create_user(USER, PASSWORD)
    mysql = MysqlSettings(cdc.mariadb.host, cdc.mariadb.port, USER, PASSWORD)
    create_shop(cdc.mariadb)
    source = Source(cdc.mariadb)
    try:
        # `SET timestamp` is the source's clock: NOW() and the binlog event time follow it.
        with source.conn.cursor() as cur:
            cur.execute("SET timestamp = %s", (int(at(DAY1, 7, 8, 9).timestamp()),))
            cur.execute("SELECT UNIX_TIMESTAMP(), NOW()")
            assert cur.fetchone() == (int(at(DAY1, 7, 8, 9).timestamp()), dt.datetime(2024, 1, 1, 7, 8, 9))

        # ---------------------------------------------------------------- 1. initial state + snapshot bootstrap
        initial_rows(source)
        config = config_dict(f"binlog.{SOURCE_DB}.e2e{uuid.uuid4().hex[:8]}")
        position = read_binlog_position(mysql)  # before the snapshot: the stamp, and where streaming starts
        tables = source_config_from_dict(config).databases[0]
        snapshots = {
            name: snapshot_table(spark, mysql, SOURCE_DB, tables.table(name), position=position)
            for name in TABLES
        }
        assert snapshots["user_info"].shards == list(TABLES["user_info"].shards)
        pipeline = Pipeline(
            cdc=cdc,
            spark=spark,
            store=table_store,
            tmp_path=tmp_path,
            source=source,
            config=config,
            mysql=mysql,
            start_gtid=position.gtid_pos,
        )
        pipeline.bootstrap({name: snap.df for name, snap in snapshots.items()}, position.binlog_seq)
        expected = {name: source.content(name) for name in TABLES}
        pipeline.assert_ods_equals(SNAPSHOT_DT, expected)
        timings["bootstrap"] = time.monotonic() - t0

        # ---------------------------------------------------------------- 2-3. day 1
        t = time.monotonic()
        day1_changes(source)
        # The collector catches up at 23:58: hours up to 22 are done (22:00 + 1 h + 15 min <= 23:58), 23 is not.
        early = at(DAY1, 23, 58)
        stats = pipeline.collect_in_process(early)
        assert stats.row_changes == source.row_changes[DAY1] and stats.statements == 0
        first, markers = pipeline.land_hourly()
        assert (first.read, first.landed, first.duplicates, first.quarantined) == (
            stats.messages,
            source.row_changes[DAY1],
            0,
            0,
        )
        assert first.heartbeats == stats.heartbeats > 0
        assert hours_done(pipeline.warehouse, SOURCE_DB, DAY1) == expected_done_hours(DAY1, early) != []
        assert not day_complete(pipeline.warehouse, SOURCE_DB, DAY1)
        assert not pipeline.merge_if_complete(DAY1)
        pipeline.assert_no_merge_output(DAY1)

        # Every change of day 1 landed with the event time the source clock gave it: dt=2024-01-01.
        rows = pipeline.raw_rows(DAY1)
        assert len(rows) == source.row_changes[DAY1] and len({r.event_uid for r in rows}) == len(rows)
        assert {r.event_ts_ms for r in rows} == source.event_times[DAY1]
        assert {(r.dt, r.hour) for r in rows} == {
            (DAY1, f"{w // HOUR_MS % 24:02d}") for w in source.event_times[DAY1]
        }
        assert {r.table_name for r in rows} == set(TABLES)

        # The clock passes midnight + lateness: the idle collector's heartbeat completes the day.
        late = at(DAY2, 0, 30)
        idle = pipeline.collect_in_process(late)
        assert idle.row_changes == 0
        second, markers = pipeline.land_hourly()
        assert second.landed == 0 and second.heartbeats > 0 and second.low_watermark_ms >= ms(late)
        assert markers == [(DAY1, "23")]
        assert day_complete(pipeline.warehouse, SOURCE_DB, DAY1)
        assert hours_done(pipeline.warehouse, SOURCE_DB, DAY2) == []
        assert pipeline.merge_if_complete(DAY1)
        source_day1 = {name: source.content(name) for name in TABLES}
        pipeline.assert_ods_equals(DAY1, source_day1)
        assert all(source_day1[n] != expected[n] for n in TABLES)  # the day changed every table
        timings["day1"] = time.monotonic() - t

        # ---------------------------------------------------------------- 2-4. day 2, collector killed mid-stream
        t = time.monotonic()
        day2_changes(source)
        final_gtid = source.gtid_pos()
        day1_gtid = pipeline.saved_gtid()
        clock = at(DAY3, 0, 30)
        proc = subprocess.Popen(
            pipeline.collect_command("--flush-every", "10"),
            env=pipeline.collect_env(clock),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            wait_for(
                lambda: pipeline.saved_gtid() not in (None, day1_gtid), 60, "a saved commit of day 2", proc
            )
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        killed_at = saved_position(pipeline.position_db, pipeline.source_config.source_id)
        assert gtid_seq(killed_at.gtid_pos) < gtid_seq(final_gtid), "killed after the end: nothing was tested"
        sent = [m for m in cdc.changes(pipeline.topic) if m["es"] >= ms(at(DAY2, 0))]
        unsaved = [m for m in sent if gtid_seq(m["gtid"]) > gtid_seq(killed_at.gtid_pos)]
        expected_day2 = source.row_changes[DAY2] + source.ddl[DAY2]
        assert 0 < len(sent) < expected_day2

        # The hourly landing runs while the collector is down: what arrived lands, the day is not complete.
        partial, _ = pipeline.land_hourly()
        assert partial.landed == len(sent) and partial.duplicates == 0 and partial.quarantined == 0
        assert not day_complete(pipeline.warehouse, SOURCE_DB, DAY2)
        assert not pipeline.merge_if_complete(DAY2)
        pipeline.assert_no_merge_output(DAY2)

        restart = subprocess.run(
            pipeline.collect_command(),
            env=pipeline.collect_env(clock),
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert restart.returncode == 0, restart.stderr[-2000:]
        assert "stopped by eof" in restart.stdout and PASSWORD not in restart.stdout + restart.stderr
        assert pipeline.saved_gtid() == final_gtid
        after, markers = pipeline.land_hourly()
        # The restart repeated exactly the changes sent after the last saved commit; they land once.
        assert after.duplicates == len(unsaved) and after.quarantined == 0
        assert partial.landed + after.landed == expected_day2
        assert ms(clock) <= after.low_watermark_ms < ms(clock + dt.timedelta(minutes=5))  # the shifted clock
        assert day_complete(pipeline.warehouse, SOURCE_DB, DAY2)
        assert hours_done(pipeline.warehouse, SOURCE_DB, DAY3) == []
        rows = pipeline.raw_rows(DAY2)
        assert len(rows) == expected_day2 and len({r.event_uid for r in rows}) == len(rows)
        assert {r.event_ts_ms for r in rows} == source.event_times[DAY2]
        assert sum(r.op == "ddl" for r in rows) == 1
        assert pipeline.merge_if_complete(DAY2)
        source_day2 = {name: source.content(name) for name in TABLES}
        assert "stock" in source_day2["product"][0]
        pipeline.assert_ods_equals(DAY2, source_day2)
        timings["day2"] = time.monotonic() - t

        # ---------------------------------------------------------------- 4. re-land already landed offsets
        t = time.monotonic()
        state_before = {name: pipeline.ods_content(name, DAY2, state=True) for name in TABLES}
        commits_before = table_store.history(raw_table_ref(SOURCE_DB))
        again = land(
            spark,
            table_store,
            {"bootstrap.servers": cdc.broker.bootstrap_servers},
            pipeline.topic,
            partial.start_offsets,  # from the start of day 2, over everything landed since
            after.end_offsets,
            pipeline.rules,
            database=SOURCE_DB,
        )
        assert again.read == partial.read + after.read and again.landed == 0
        assert again.duplicates == again.read - again.heartbeats and again.written_partitions == []
        assert table_store.history(raw_table_ref(SOURCE_DB)) == commits_before, "re-landing committed again"
        assert pipeline.merge_if_complete(DAY2)  # the merge re-runs over the re-landed day
        pipeline.assert_ods_equals(DAY2, source_day2)
        assert {name: pipeline.ods_content(name, DAY2, state=True) for name in TABLES} == state_before
        # The day replayed onto its own result changes nothing either (events at or before a row's position).
        for name in TABLES:
            stored = ods_store.state_at(table_store, ods_name(name), DAY2)
            replayed = pipeline.merged(name, DAY2, stored)
            columns = sorted(replayed.columns)
            got = sort_rows(
                [
                    tuple(r)
                    for r in replayed.select(*[F.col(f"`{c}`").cast("string") for c in columns]).collect()
                ]
            )
            assert (columns, got) == state_before[name], f"replaying day 2 onto {name} changed it"
        timings["reland"] = time.monotonic() - t

        # ---------------------------------------------------------------- 5-6. day 3: bad records, incomplete day
        t = time.monotonic()
        cdc.produce(
            pipeline.topic, bad_records(killed_at.binlog_file, at(DAY3, 2)), timestamp_ms=ms(at(DAY3, 2))
        )
        day3_changes(source)
        clock3 = at(DAY3, 6, 30)
        stats3 = pipeline.collect_in_process(clock3)
        third, _ = pipeline.land_hourly()
        assert (third.quarantined, third.landed, third.duplicates) == (3, source.row_changes[DAY3], 0)
        assert third.read == 3 + stats3.messages
        assert third.quarantine_reasons == {
            "not JSON": 1,
            "no binlog identity": 1,
            f"unknown table {SOURCE_DB}.accounts": 1,
        }
        quarantined = table_store.read_partitions(quarantine_table_ref(SOURCE_DB), [{"dt": DAY3}]).collect()
        assert sorted(q.reason.split(":")[0] for q in quarantined) == sorted(third.quarantine_reasons)
        assert {bytes(q.raw_value) for q in quarantined if q.reason.startswith("not JSON")} == {
            b"\x00{not json"
        }
        assert len(pipeline.raw_rows(DAY3)) == source.row_changes[DAY3]
        assert hours_done(pipeline.warehouse, SOURCE_DB, DAY3) == expected_done_hours(DAY3, clock3) != []
        assert not day_complete(pipeline.warehouse, SOURCE_DB, DAY3)
        assert not pipeline.merge_if_complete(DAY3)
        pipeline.assert_no_merge_output(DAY3)
        # ... while the complete days stay as they were.
        pipeline.assert_ods_equals(DAY1, source_day1)
        pipeline.assert_ods_equals(DAY2, source_day2)

        # Done markers were honest: no hour gained a row after its marker was written.
        for (day, hour), uids in pipeline.done_hour_uids.items():
            now = {r.event_uid for r in pipeline.raw_rows(day) if r.hour == hour}
            assert now == uids, f"hour {day} {hour} changed after it was marked done"
        timings["day3"] = time.monotonic() - t
    finally:
        source.close()
    timings["total"] = time.monotonic() - t0
    print("end-to-end timings (s):", {k: round(v, 1) for k, v in timings.items()})
    print(f"day 2: killed after {len(sent)} of {expected_day2} changes, {len(unsaved)} sent again on restart")
