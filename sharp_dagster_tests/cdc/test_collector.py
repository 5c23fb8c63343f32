"""The collector against a real MariaDB row binlog and a real Kafka-protocol broker."""

from __future__ import annotations

import base64
import dataclasses
import json

import pytest
from pymysqlreplication.row_event import TableMapEvent

from sharp_dagster.cdc.capture import collector as collector_module
from sharp_dagster.cdc.capture.collector_state import CollectorError, CollectorState, FileStateStore
from sharp_dagster.cdc.change.messages import parse_message
from sharp_dagster.cdc.source.clock import caught_up_ms

TABLE_DDL = "(id INT PRIMARY KEY, name VARCHAR(32), score DECIMAL(10,2))"


def binlog_events(cdc) -> dict[tuple[str, int], tuple[str, int]]:
    """(file, start position) -> (event type, end position) for every event of every binlog file."""
    conn = cdc.mariadb.connect()
    events = {}
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW BINARY LOGS")
            for name, *_rest in cur.fetchall():
                cur.execute(f"SHOW BINLOG EVENTS IN '{name}'")
                for log_name, pos, event_type, _server, end_pos, _info in cur.fetchall():
                    events[(log_name, pos)] = (event_type, end_pos)
    finally:
        conn.close()
    return events


def test_row_changes_ddl_and_truncate_over_shards(cdc):
    db = cdc.new_database()
    cdc.sql(
        db,
        f"CREATE TABLE user_info_1 {TABLE_DDL}",
        f"CREATE TABLE user_info_2 {TABLE_DDL}",
        f"CREATE TABLE user_info_1_bak {TABLE_DDL}",
        f"CREATE TABLE _user_info_1_gho {TABLE_DDL}",
        "INSERT INTO user_info_1 VALUES (1, 'ann', 1.50), (2, 'bob', NULL)",
        "INSERT INTO user_info_2 VALUES (10, 'cid', 3.00)",
        "INSERT INTO user_info_1_bak VALUES (1, 'shadow', 0)",
        "INSERT INTO _user_info_1_gho VALUES (1, 'shadow', 0)",
        "UPDATE user_info_1 SET score = 2.25 WHERE id = 1",
        "UPDATE user_info_1 SET id = 3 WHERE id = 2",
        "DELETE FROM user_info_2 WHERE id = 10",
        "BEGIN",
        "INSERT INTO user_info_2 VALUES (11, 'eve', 5.00)",
        "UPDATE user_info_2 SET name = 'eva' WHERE id = 11",
        "COMMIT",
        "ALTER TABLE user_info_1 ADD COLUMN email VARCHAR(64)",
        "INSERT INTO user_info_1 VALUES (4, 'dan', 4.00, 'd@x.org')",
        "TRUNCATE TABLE user_info_2",
    )
    source = cdc.config(db)
    stats = cdc.collector(source).run(once=True)
    assert stats.stopped_by == "eof"

    msgs = cdc.changes(f"binlog.{db}")
    summary = [(m["type"], m["table"], m["data"][0] if m["data"] else None) for m in msgs]
    assert summary == [
        ("CREATE", "user_info_1", None),
        ("CREATE", "user_info_2", None),
        ("INSERT", "user_info_1", {"id": "1", "name": "ann", "score": "1.50"}),
        ("INSERT", "user_info_1", {"id": "2", "name": "bob", "score": None}),
        ("INSERT", "user_info_2", {"id": "10", "name": "cid", "score": "3.00"}),
        ("UPDATE", "user_info_1", {"id": "1", "name": "ann", "score": "2.25"}),
        ("UPDATE", "user_info_1", {"id": "3", "name": "bob", "score": None}),
        ("DELETE", "user_info_2", {"id": "10", "name": "cid", "score": "3.00"}),
        ("INSERT", "user_info_2", {"id": "11", "name": "eve", "score": "5.00"}),
        ("UPDATE", "user_info_2", {"id": "11", "name": "eva", "score": "5.00"}),
        ("ALTER", "user_info_1", None),
        ("INSERT", "user_info_1", {"id": "4", "name": "dan", "score": "4.00", "email": "d@x.org"}),
        ("TRUNCATE", "user_info_2", None),
    ]
    by_type = {}
    for m in msgs:
        by_type.setdefault(m["type"], []).append(m)

    # UPDATE: Canal's `old` holds the changed columns only; `before` holds the whole before image.
    score_update, key_update = by_type["UPDATE"][0], by_type["UPDATE"][1]
    assert score_update["old"] == [{"score": "1.50"}]
    assert score_update["before"] == [{"id": "1", "name": "ann", "score": "1.50"}]
    assert key_update["old"] == [{"id": "2"}]
    assert key_update["before"] == [{"id": "2", "name": "bob", "score": None}]
    assert msgs[-3]["sql"] == "ALTER TABLE user_info_1 ADD COLUMN email VARCHAR(64)"
    assert msgs[-1]["sql"] == "TRUNCATE TABLE user_info_2" and msgs[-1]["isDdl"] is False
    assert msgs[-3]["isDdl"] is True

    # Identity: the start position of the rows/query event in the real binlog, row index inside the event.
    events = binlog_events(cdc)
    for m in msgs:
        event_type, _end = events[(m["binlogFile"], m["binlogPos"])]
        expected = {"INSERT": "Write_rows", "UPDATE": "Update_rows", "DELETE": "Delete_rows"}.get(
            m["type"], "Query"
        )
        assert event_type.startswith(expected), (m["type"], event_type)
        assert m["sourceId"] == "test-mariadb" and m["serverId"] == 1 and m["pkNames"] == ["id"]
    two_rows = [m for m in msgs if m["type"] == "INSERT" and m["table"] == "user_info_1"][:2]
    assert two_rows[0]["binlogPos"] == two_rows[1]["binlogPos"] and [m["rowIdx"] for m in two_rows] == [0, 1]
    identities = [(m["binlogFile"], m["binlogPos"], m["rowIdx"]) for m in msgs]
    assert len(set(identities)) == len(identities)

    # GTID: each message carries its own transaction's GTID; the explicit transaction shares one.
    txn = [m for m in msgs if m["table"] == "user_info_2" and m["data"] and m["data"][0]["id"] == "11"]
    assert len({m["gtid"] for m in txn}) == 1
    assert len({m["gtid"] for m in msgs}) == len(msgs) - 2  # the two-row insert and the transaction
    assert all(m["gtid"].startswith("0-1-") for m in msgs)

    # Partitioning: one key stays in one partition, DDL and TRUNCATE go to partition 0, heartbeats everywhere.
    records = cdc.read_topic(f"binlog.{db}")
    partition_of_key: dict[bytes, set[int]] = {}
    for r in records:
        v = r["value"]
        if v["type"] in ("CREATE", "ALTER", "TRUNCATE"):
            assert r["partition"] == 0 and r["key"] is None
        elif v["type"] != "HEARTBEAT":
            partition_of_key.setdefault(r["key"], set()).add(r["partition"])
    assert partition_of_key[b'user_info|["1"]'] and all(len(p) == 1 for p in partition_of_key.values())
    assert {r["partition"] for r in records if r["value"]["type"] == "HEARTBEAT"} == {0, 1}

    # The resume position is the server's position after the last transaction.
    state = FileStateStore(cdc.tmp_path / "state.json").load()
    assert state is not None and state.gtid_pos == cdc.gtid_pos()
    assert stats.state == state and stats.row_changes == 9 and stats.statements == 4


def test_values_travel_as_canonical_strings(cdc):
    db = cdc.new_database()
    cdc.sql(
        db,
        "CREATE TABLE typed (id BIGINT UNSIGNED PRIMARY KEY, d DECIMAL(12,3), f DOUBLE, dt DATETIME(6), "
        "ts TIMESTAMP(3) NULL, day DATE, t TIME(2), y YEAR, b VARBINARY(8), blb BLOB, txt TEXT, "
        "e ENUM('a','b'), s SET('x','y','z'), j JSON, n INT NULL)",
        # A client in +05:00 writes a TIMESTAMP: it travels in UTC.
        "SET time_zone = '+05:00'",
        "INSERT INTO typed VALUES (18446744073709551615, -12.5, 0.1, '2024-02-29 23:59:59.000001', "
        "'2024-01-02 08:04:05.678', '2024-02-29', '-01:02:03.5', 2024, x'00ff10', x'cafe', 'héllo', 'b', 'z,x', "
        '\'{"b": 1, "a": [1, 2]}\', NULL)',
    )
    cdc.collector(cdc.config(db)).run(once=True)
    (msg,) = [m for m in cdc.changes(f"binlog.{db}") if m["type"] == "INSERT"]
    assert msg["data"][0] == {
        "id": "18446744073709551615",
        "d": "-12.500",
        "f": "0.1",
        "dt": "2024-02-29 23:59:59.000001",
        "ts": "2024-01-02 03:04:05.678000",
        "day": "2024-02-29",
        "t": "-1:02:03.500000",
        "y": "2024",
        "b": base64.b64encode(b"\x00\xff\x10").decode(),
        "blb": base64.b64encode(b"\xca\xfe").decode(),
        "txt": "héllo",
        "e": "b",
        "s": "x,z",
        "j": '{"b": 1, "a": [1, 2]}',  # MariaDB's JSON is LONGTEXT: its text travels unchanged
        "n": None,
    }
    assert msg["mysqlType"]["id"] == "bigint unsigned" and msg["mysqlType"]["d"] == "decimal"
    assert msg["mysqlType"]["blb"] == "blob" and msg["mysqlType"]["txt"] == "text"


def _gtid_seq(gtid: str) -> int:
    return int(gtid.rsplit("-", 1)[1])


def test_replay_from_an_earlier_commit_repeats_changes_with_the_same_identity(cdc):
    """A restart resumes at the last saved commit; what it sends again must be byte-for-byte the same change."""
    db = cdc.new_database()
    cdc.sql(db, f"CREATE TABLE user_info_1 {TABLE_DDL}", f"CREATE TABLE user_info_2 {TABLE_DDL}")
    for i in range(12):
        shard = 1 + i % 2
        cdc.sql(
            db,
            f"INSERT INTO user_info_{shard} VALUES ({3 * i}, 'a{i}', {i}.25), ({3 * i + 1}, 'b{i}', NULL)",
            f"UPDATE user_info_{shard} SET score = score + 1 WHERE id = {3 * i}",
            f"DELETE FROM user_info_{shard} WHERE id = {3 * i + 1}",
        )

    saved: list[CollectorState] = []

    class Recording(FileStateStore):
        def save(self, state: CollectorState) -> None:
            saved.append(state)
            super().save(state)

    first_topic, second_topic = f"binlog.{db}.first", f"binlog.{db}.second"
    cdc.collector(
        cdc.config(db, topic=first_topic), Recording(cdc.tmp_path / "a.json"), flush_max_messages=4
    ).run(once=True)
    assert len(saved) >= 5, "the first run should have saved several commits"
    middle = saved[len(saved) // 2]
    replay_store = FileStateStore(cdc.tmp_path / "b.json")
    replay_store.save(middle)
    cdc.collector(cdc.config(db, topic=second_topic), replay_store).run(once=True)

    def comparable(m: dict) -> dict:
        return {k: v for k, v in m.items() if k not in ("id", "ts")}  # per-run counter and send time

    first, replay = cdc.changes(first_topic), cdc.changes(second_topic)
    after_middle = [m for m in first if _gtid_seq(m["gtid"]) > _gtid_seq(middle.gtid_pos)]
    assert 0 < len(after_middle) < len(first)
    assert [comparable(m) for m in replay] == [comparable(m) for m in after_middle]

    # ... so the raw rows they become share their event_uid, and the merge can drop the repeats.
    rules = cdc.config(db).databases[0].shard_rules

    def uid(m: dict) -> str:
        return parse_message(json.dumps(m).encode(), "t", 0, 0, rules)["event_uid"]

    assert [uid(m) for m in replay] == [uid(m) for m in after_middle]


def test_collector_refuses_a_wrong_flavor_and_an_unknown_start(cdc):
    db = cdc.new_database()
    cdc.sql(db, f"CREATE TABLE user_info_1 {TABLE_DDL}", "INSERT INTO user_info_1 VALUES (1, 'a', 1)")
    mysql_flavored = dataclasses.replace(cdc.config(db), flavor="mysql")
    with pytest.raises(CollectorError, match="but the config says flavor 'mysql'"):
        cdc.collector(mysql_flavored).run(once=True)
    with pytest.raises(CollectorError, match="binlog stream from root@127.0.0.1"):
        cdc.collector(cdc.config(db), start="0-1-999999999").run(once=True)
    assert not (cdc.tmp_path / "state.json").exists()


def test_first_run_starts_where_asked(cdc):
    db = cdc.new_database()
    cdc.sql(db, f"CREATE TABLE user_info_1 {TABLE_DDL}", "INSERT INTO user_info_1 VALUES (1, 'before', 1)")
    conn = cdc.mariadb.connect()
    with conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        file_name, pos = cur.fetchone()[:2]
    conn.close()
    cdc.sql(db, "INSERT INTO user_info_1 VALUES (2, 'after', 2)")

    at_position = cdc.collector(
        cdc.config(db, topic=f"{db}.pos"), cdc.tmp_path / "p.json", start=f"{file_name}:{pos}"
    )
    at_position.run(once=True)
    assert [m["data"][0]["name"] for m in cdc.changes(f"{db}.pos")] == ["after"]

    at_end = cdc.collector(cdc.config(db, topic=f"{db}.end"), cdc.tmp_path / "e.json", start="current")
    stats = at_end.run(once=True)
    assert stats.row_changes == 0 and cdc.changes(f"{db}.end") == []
    with pytest.raises(CollectorError, match="start must be"):
        cdc.collector(cdc.config(db), start="yesterday")


class _HostClockAhead:
    """The collector module's `time`, on a host whose wall clock runs three days ahead of the server's."""

    def __init__(self):
        import time

        self._time = time

    def time(self) -> float:
        return self._time.time() + 3 * 86_400

    def __getattr__(self, name):
        return getattr(self._time, name)


def heartbeat_times(cdc, topic: str) -> list[int]:
    return [r["value"]["es"] for r in cdc.read_topic(topic) if r["value"]["type"] == "HEARTBEAT"]


def server_now_ms(cdc) -> int:
    conn = cdc.mariadb.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)")
            return int(cur.fetchone()[0])
    finally:
        conn.close()


def test_caught_up_heartbeat_uses_the_source_servers_clock(cdc, monkeypatch):
    db = cdc.new_database()
    cdc.sql(db, f"CREATE TABLE user_info_1 {TABLE_DDL}", "INSERT INTO user_info_1 VALUES (1, 'a', 1)")
    monkeypatch.setattr(collector_module, "time", _HostClockAhead())
    before = server_now_ms(cdc)
    # No checkpoint before the end: a checkpoint heartbeat (the last commit's time) comes whenever a commit is read
    # more than flush_interval_s after the run began, which under load it was (4 heartbeats, not 2).
    cdc.collector(cdc.config(db), flush_interval_s=3600).run(once=True)
    after = server_now_ms(cdc)
    times = heartbeat_times(cdc, f"binlog.{db}")
    assert len(times) == 2  # one per partition
    assert all(before <= es <= after for es in times), (before, times, after)


def test_without_a_source_clock_the_heartbeat_stays_at_the_last_commit(cdc):
    db = cdc.new_database()
    commit_s = 1_704_153_600  # 2024-01-02 00:00:00 UTC, the source's (simulated) clock
    cdc.sql(
        db,
        f"CREATE TABLE user_info_1 {TABLE_DDL}",
        f"SET timestamp = {commit_s}",
        "INSERT INTO user_info_1 VALUES (1, 'a', 1)",
    )
    # Replication stopped on a replica source: the clock cannot tell how far the binlog has got. (No checkpoint
    # before the end, whose heartbeat would carry CREATE DATABASE's real-clock commit: see the test above.)
    cdc.collector(cdc.config(db), clock=lambda: None, flush_interval_s=3600).run(once=True)
    assert heartbeat_times(cdc, f"binlog.{db}") == [commit_s * 1000] * 2
    # A clock behind the events already read never moves the watermark back.
    behind = cdc.collector(
        cdc.config(db, topic=f"{db}.behind"),
        cdc.tmp_path / "b.json",
        clock=lambda: 0,
        flush_interval_s=3600,
    )
    behind.run(once=True)
    assert heartbeat_times(cdc, f"{db}.behind") == [commit_s * 1000] * 2


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (None, 1_000_000),  # a primary
        ({"Seconds_Behind_Master": 120, "Slave_SQL_Running": "Yes"}, 880_000),  # MariaDB / older MySQL
        ({"Seconds_Behind_Source": 0}, 1_000_000),  # MySQL 8.0.22+
        ({"Seconds_Behind_Master": None, "Slave_SQL_Running": "No"}, None),  # replication stopped
    ],
)
def test_caught_up_time_on_a_replica_subtracts_its_lag(status, expected):
    assert caught_up_ms(1_000_000, status) == expected


def test_a_table_map_is_parsed_once_per_table_id_and_again_after_ddl(cdc, monkeypatch):
    """Binlog table maps repeat before every statement; the collector parses a table id's map once (the
    library's table-map cache) and a DDL's new table id again, so a changed table is read with its new columns."""
    parsed: list[str] = []
    full_parse = TableMapEvent._get_optional_meta_data  # reached only when a table map is parsed whole

    def counting(self):
        parsed.append(self.table)
        return full_parse(self)

    monkeypatch.setattr(TableMapEvent, "_get_optional_meta_data", counting)
    db = cdc.new_database()
    inserts = [f"INSERT INTO user_info_{1 + i % 2} VALUES ({i}, 'n{i}', {i}.50)" for i in range(20)]
    cdc.sql(
        db,
        f"CREATE TABLE user_info_1 {TABLE_DDL}",
        f"CREATE TABLE user_info_2 {TABLE_DDL}",
        *inserts,
        "ALTER TABLE user_info_1 ADD COLUMN email VARCHAR(64)",
        "INSERT INTO user_info_1 VALUES (100, 'dan', 4.00, 'd@x.org')",
        "INSERT INTO user_info_2 VALUES (101, 'eve', 5.00)",
    )
    stats = cdc.collector(cdc.config(db)).run(once=True)

    assert stats.row_changes == 22
    assert sorted(parsed) == ["user_info_1", "user_info_1", "user_info_2"]
    rows = [m for m in cdc.changes(f"binlog.{db}") if m["type"] == "INSERT"]
    assert [m["data"][0]["id"] for m in rows] == [str(i) for i in range(20)] + ["100", "101"]
    assert rows[-2]["data"][0] == {"id": "100", "name": "dan", "score": "4.00", "email": "d@x.org"}
    assert rows[-1]["data"][0] == {"id": "101", "name": "eve", "score": "5.00"}
