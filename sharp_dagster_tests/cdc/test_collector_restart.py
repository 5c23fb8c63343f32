"""The collector as a process: killed mid-stream it loses nothing; SIGTERM stops it cleanly; no password leaks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from sharp_dagster.cdc import binlog_schema as bs
from sharp_dagster.cdc.collector_state import FileStateStore

PASSWORD = "pw-Secret-4711"
USER = "cdc_reader"


def _gtid_seq(gtid: str) -> int:
    return int(gtid.rsplit("-", 1)[1])


def _write_config(cdc, db: str, path: Path) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "source_id": "test-mariadb",
                "replica_server_id": 6001,
                "topic_partitions": 2,
                "databases": [
                    {
                        "name": db,
                        "tables": [
                            {"name": "user_info", "shard_regex": r"user_info_(\d+)", "primary_key": ["id"]}
                        ],
                    }
                ],
            }
        )
    )
    return path


def _collect_cmd(cdc, config: Path, state: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "sharp_dagster.cli.cdc",
        "collect",
        "--config",
        str(config),
        "--host",
        cdc.mariadb.host,
        "--port",
        str(cdc.mariadb.port),
        "--user",
        USER,
        "--bootstrap-servers",
        cdc.broker.bootstrap_servers,
        "--state-file",
        str(state),
        "--start",
        cdc.start_gtid,
        *extra,
    ]


def _env() -> dict[str, str]:
    return {**os.environ, "SHARP_CDC_MYSQL_PASSWORD": PASSWORD}


def _wait_for(predicate, timeout: float, what: str, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if proc is not None and proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"collector exited ({proc.returncode}) before {what}: {err[-2000:]}")
        time.sleep(0.005)
    raise AssertionError(f"timed out waiting for {what}")


def test_sigkill_mid_stream_then_restart_delivers_every_change_with_stable_identity(cdc):
    db = cdc.new_database()
    cdc.mariadb.create_user(USER, PASSWORD)
    cdc.sql(
        db,
        "CREATE TABLE user_info_1 (id INT PRIMARY KEY, v INT)",
        "CREATE TABLE user_info_2 (id INT PRIMARY KEY, v INT)",
    )
    n_txn, per_txn = 300, 10
    statements = []
    for t in range(n_txn):
        shard = 1 + t % 2
        values = ", ".join(f"({t * per_txn + r}, {r})" for r in range(per_txn))
        statements.append(f"INSERT INTO user_info_{shard} VALUES {values}")
    statements += [
        f"UPDATE user_info_{1 + t % 2} SET v = v + 100 WHERE id = {t * per_txn}" for t in range(n_txn)
    ]
    cdc.sql(db, *statements)
    expected_changes = n_txn * per_txn + n_txn + 2  # row changes and the two CREATE TABLE statements
    final_gtid = cdc.gtid_pos()

    config = _write_config(cdc, db, cdc.tmp_path / "source.yaml")
    state = cdc.tmp_path / "collector.state.json"
    proc = subprocess.Popen(
        _collect_cmd(cdc, config, state, "--once", "--flush-every", "20"),
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for(state.exists, 60, "the first saved commit", proc)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    killed_at = FileStateStore(state).load()
    assert killed_at is not None
    assert _gtid_seq(killed_at.gtid_pos) < _gtid_seq(final_gtid), (
        "the kill came after the end: nothing was tested"
    )
    before_restart = cdc.changes(f"binlog.{db}")
    assert len(before_restart) < expected_changes
    # Sent after the last saved commit, before the kill: the restart must send exactly these again.
    unsaved = [m for m in before_restart if _gtid_seq(m["gtid"]) > _gtid_seq(killed_at.gtid_pos)]

    restart = subprocess.run(
        _collect_cmd(cdc, config, state, "--once"), env=_env(), capture_output=True, text=True, timeout=120
    )
    assert restart.returncode == 0, restart.stderr[-2000:]
    assert "stopped by eof" in restart.stdout
    assert PASSWORD not in restart.stdout + restart.stderr
    assert FileStateStore(state).load().gtid_pos == final_gtid

    msgs = cdc.changes(f"binlog.{db}")
    uids: dict[str, list[dict]] = {}
    for m in msgs:
        uid = bs.event_uid(m["sourceId"], m["binlogFile"], m["binlogPos"], m["rowIdx"])
        uids.setdefault(uid, []).append(m)
    # Nothing lost, and every repeat is the same change under the same identity: de-duplication is exact.
    assert len(uids) == expected_changes
    assert len(msgs) - expected_changes == len(unsaved)
    for copies in uids.values():
        assert (
            len(
                {
                    json.dumps({k: v for k, v in c.items() if k not in ("id", "ts")}, sort_keys=True)
                    for c in copies
                }
            )
            == 1
        )
    inserted = {int(m["data"][0]["id"]) for m in msgs if m["type"] == "INSERT"}
    assert inserted == set(range(n_txn * per_txn))
    updated = {int(m["data"][0]["id"]) for m in msgs if m["type"] == "UPDATE"}
    assert updated == {t * per_txn for t in range(n_txn)}


def test_running_collector_streams_new_changes_and_stops_cleanly_on_sigterm(cdc):
    db = cdc.new_database()
    cdc.mariadb.create_user(USER, PASSWORD)
    cdc.sql(
        db, "CREATE TABLE user_info_1 (id INT PRIMARY KEY, v INT)", "INSERT INTO user_info_1 VALUES (1, 1)"
    )
    config = _write_config(cdc, db, cdc.tmp_path / "source.yaml")
    state = cdc.tmp_path / "collector.state.json"
    store = FileStateStore(state)

    def saved_gtid() -> str | None:
        try:
            loaded = store.load()
        except Exception:
            return None
        return loaded.gtid_pos if loaded else None

    proc = subprocess.Popen(
        _collect_cmd(cdc, config, state, "--flush-interval", "0.1", "--heartbeat-interval", "0.5"),
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first = cdc.gtid_pos()
        _wait_for(lambda: saved_gtid() == first, 60, "the first insert", proc)
        # While it runs: new changes arrive without a restart.
        cdc.sql(db, "INSERT INTO user_info_1 VALUES (2, 2)", "UPDATE user_info_1 SET v = 3 WHERE id = 1")
        second = cdc.gtid_pos()
        _wait_for(lambda: saved_gtid() == second, 30, "the live changes", proc)
        os.kill(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 0, err[-2000:]
    assert "stopped by stop" in out
    assert PASSWORD not in out + err
    records = cdc.read_topic(f"binlog.{db}")
    kinds = [
        (r["value"]["type"], r["value"]["data"][0]["id"])
        for r in records
        if r["value"]["type"] in ("INSERT", "UPDATE")
    ]
    assert sorted(kinds) == [("INSERT", "1"), ("INSERT", "2"), ("UPDATE", "1")]
    # Idle, it still sends heartbeats (caught up): the landing's watermark moves without changes.
    assert {r["partition"] for r in records if r["value"]["type"] == "HEARTBEAT"} == {0, 1}
