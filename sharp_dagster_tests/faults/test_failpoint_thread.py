"""A fail point reached on a thread other than the main one (a table's lifecycle on the source-day pool,
`assets/ods_source.py`) stops the process at that very line: nothing after it runs, no lock is held.

Sent to the process, SIGSTOP goes to the main thread, and the thread that reached the point ran on until the
main thread was scheduled: on a busy machine into the next step's job-log transaction, so the frozen run held
SQLite's write lock and the test's refused run failed with `database is locked` (`logdriven/test_kill.py`,
`faults/test_takeover.py`). The child here plays that busy machine: pinned to one CPU, its main thread at the
idle scheduling policy, so that the main thread only runs when the worker blocks: the worker, unless stopped at
once, always gets into its transaction first.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

from sharp_dagster.settings import FAILPOINTS_ENV
from sharp_dagster_tests.logdriven.kill_support import stopped

# The worker: the fail point, then what a lifecycle does next (a job-log write), slowly. The main thread waits, as
# the op's thread waits on the pool.
CHILD = textwrap.dedent(
    """
    import os, sqlite3, sys, threading, time
    from sharp_dagster.failpoints import failpoint
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    db, marker = sys.argv[1], sys.argv[2]
    lowered = threading.Event()

    def worker():
        lowered.wait()
        failpoint("after_audit")
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT)
        os.write(fd, b"ran on")
        os.close(fd)
        conn = sqlite3.connect(db, timeout=0, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO t VALUES (1)")
        time.sleep(5)
        conn.execute("COMMIT")

    thread = threading.Thread(target=worker)
    thread.start()
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))  # this thread only; the worker's stays
    lowered.set()
    thread.join()
    """
)


def free_for_writing(db) -> bool:
    """Can a writer take SQLite's write lock at once (no waiting)?"""
    conn = sqlite3.connect(db, timeout=0, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError as exc:
        assert "locked" in str(exc), exc
        return False
    finally:
        conn.close()


def test_a_failpoint_stop_on_a_worker_thread_stops_it_before_its_next_line(tmp_path):
    db, marker = tmp_path / "log.db", tmp_path / "after"
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE t (x INTEGER)")
    env = {**os.environ, FAILPOINTS_ENV: "after_audit=stop"}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(db), str(marker)], env=env, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 60
        while not stopped(child.pid) and child.poll() is None:
            assert time.monotonic() < deadline, "the child never reached its fail point"
            time.sleep(0.05)
        time.sleep(0.5)  # a worker left running would be inside its transaction by now
        assert stopped(child.pid), f"the child ended ({child.poll()}) instead of stopping"
        assert free_for_writing(db), "the stopped run holds SQLite's write lock"
        assert not marker.exists(), "the worker ran on past its fail point"
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM t").fetchone() == (0,)
