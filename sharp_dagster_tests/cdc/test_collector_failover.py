"""A server failover: the collector, pointed at a replica that has the same GTIDs (MariaDB GTID replication,
`MASTER_USE_GTID=slave_pos`), resumes by GTID from the position saved in the job-log database: every change once,
and the replica's changes order after the primary's (a binlog epoch), so the merge of them equals the source."""

from __future__ import annotations

import time
from collections import Counter

from sharp_dagster.cdc.capture.collector import Collector
from sharp_dagster.cdc.capture.collector_db import DbStateStore, saved_position
from sharp_dagster.cdc.landing.land import land
from sharp_dagster.cdc.landing.raw_tables import raw_table_ref
from sharp_dagster.cdc.merge.fold import merge_day, published
from sharp_dagster.cdc.source.config import MysqlSettings
from sharp_dagster.servers import LocalMariaDB


def _gtid(server: LocalMariaDB, variable: str) -> str:
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT @@GLOBAL.{variable}")
            return cur.fetchone()[0]
    finally:
        conn.close()


def test_collector_fails_over_to_a_replica_by_gtid(cdc, tmp_path, spark, table_store):
    replica = LocalMariaDB(base_dir=tmp_path / "replica", server_id=2, extra_args=("--log-slave-updates",))
    replica.start()
    try:
        start = "" if cdc.start_gtid == "earliest" else cdc.start_gtid
        replica.execute(
            f"SET GLOBAL gtid_slave_pos = '{start}'",
            f"CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={cdc.mariadb.port}, MASTER_USER='root', "
            "MASTER_PASSWORD='', MASTER_USE_GTID=slave_pos",
            "START SLAVE",
        )
        db = cdc.new_database("failover")
        cdc.sql(
            db,
            "CREATE TABLE user_info_1 (id INT PRIMARY KEY, v INT)",
            *(f"INSERT INTO user_info_1 VALUES ({i}, {i})" for i in range(1, 6)),
        )
        source = cdc.config(db)
        url = f"sqlite:///{tmp_path / 'log.db'}"
        options = dict(start=cdc.start_gtid, flush_interval_s=0.0)
        Collector(cdc.mysql, cdc.kafka, source, DbStateStore(url, source.source_id), **options).run(once=True)
        collected = saved_position(url, source.source_id)

        # More changes on the primary, replicated but not collected; then the primary "fails".
        cdc.sql(
            db,
            *(f"INSERT INTO user_info_1 VALUES ({i}, {i})" for i in range(6, 11)),
            "UPDATE user_info_1 SET v = 100 WHERE id = 1",
        )
        primary_pos = cdc.gtid_pos()
        deadline = time.monotonic() + 60
        while _gtid(replica, "gtid_slave_pos") != primary_pos:
            assert time.monotonic() < deadline, "the replica did not catch up"
            time.sleep(0.1)
        replica.execute("STOP SLAVE")
        # The replica, promoted, takes writes of its own (GTIDs 0-2-N continue the sequence).
        replica.execute(
            *(f"INSERT INTO user_info_1 VALUES ({i}, {i})" for i in (11, 12)),
            "UPDATE user_info_1 SET v = 200 WHERE id = 1",  # a key the primary changed too
            database=db,
        )
        source_rows = _rows(replica, db)

        on_replica = MysqlSettings(replica.host, replica.port, "root", "")
        stats = Collector(on_replica, cdc.kafka, source, DbStateStore(url, source.source_id), **options).run(
            once=True
        )
        assert stats.start_gtid == collected.gtid_pos  # resumed by GTID, not by the primary's file/position
        resumed = saved_position(url, source.source_id)
        assert resumed.gtid_pos == _gtid(replica, "gtid_binlog_pos")
        assert (resumed.server_id, resumed.binlog_epoch) == (2, 1) and collected.binlog_epoch == 0
    finally:
        replica.cleanup()
    topic = f"binlog.{db}"
    seen = Counter((m["type"], m["data"][0]["id"] if m["data"] else m["table"]) for m in cdc.changes(topic))
    expected = Counter(
        [
            ("CREATE", "user_info_1"),
            ("UPDATE", "1"),
            ("UPDATE", "1"),
            *(("INSERT", str(i)) for i in range(1, 13)),
        ]
    )
    assert seen == expected  # nothing lost, nothing sent twice across the failover

    # Downstream: every change lands (no identity of the replica's binlog taken for one of the primary's), and
    # the merge, ordering by binlog position, applies the replica's update of key 1 after the primary's.
    result = land(
        spark, table_store, cdc.kafka, topic, None, "latest", source.databases[0].shard_rules, database=db
    )
    assert (result.landed, result.duplicates) == (sum(expected.values()), 0)
    ref = raw_table_ref(db)
    changes = table_store.read_partitions(ref, table_store.list_partitions(ref)).where(
        "op IN ('c', 'u', 'd')"
    )
    state = merge_day(None, changes, ["id"], columns=[("id", "int"), ("v", "int")])
    merged = {(r.id, r.v) for r in published(state).collect()}
    assert merged == source_rows


def _rows(server: LocalMariaDB, db: str) -> set[tuple[int, int]]:
    conn = server.connect(db)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT id, v FROM user_info_1")
            return set(cur.fetchall())
    finally:
        conn.close()
