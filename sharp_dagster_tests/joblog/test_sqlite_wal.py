"""Processes opening one new SQLite job log together: the switch to WAL waits for the others (db.set_wal).

SQLite answers that switch "database is locked" at once, without its busy timeout, while another connection holds
the new file's lock: plain sqlite3 failed so in 5 and 8 of 40 rounds of four processes here, and a CI rehearsal's
`test_migrate.py::test_concurrent_first_start` failed on it. Twenty-four rounds make a regression all but certain to
show."""

from __future__ import annotations

import multiprocessing as mp
import sqlite3
from pathlib import Path

from sharp_dagster.db import set_wal

PROCESSES, ROUNDS = 4, 24


def _open(path: str, barrier, results) -> None:
    try:
        conn = sqlite3.connect(path, timeout=30, isolation_level=None)
        barrier.wait(timeout=60)
        set_wal(conn.cursor())
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("CREATE TABLE IF NOT EXISTS t (x INTEGER)")
        conn.execute("COMMIT")
        results.put(conn.execute("PRAGMA journal_mode").fetchone()[0])
    except Exception as exc:  # reported, not raised: the parent names it
        results.put(f"error: {exc}")


def test_processes_opening_one_new_file_together_all_get_wal(tmp_path: Path) -> None:
    ctx = mp.get_context("fork")
    failures = []
    for n in range(ROUNDS):
        path = str(tmp_path / f"log{n}.db")
        barrier, results = ctx.Barrier(PROCESSES), ctx.Queue()
        procs = [ctx.Process(target=_open, args=(path, barrier, results)) for _ in range(PROCESSES)]
        for proc in procs:
            proc.start()
        answers = [results.get(timeout=120) for _ in procs]
        for proc in procs:
            proc.join(timeout=60)
        failures += [(n, a) for a in answers if a != "wal"]
    assert not failures, failures
