"""The one start / wait / stop of every local server (`sharp_dagster/servers/process.py`), on small real processes
(a Python child), so each behaviour the servers rely on is seen without a JVM."""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest

from sharp_dagster.servers.process import kill_process, spawn_logged, stop_process, wait_ready

# A child that ignores SIGTERM, starts a grandchild in its own process group, says so and waits.
STUBBORN = (
    "import signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
    "print('grandchild', child.pid, flush=True); time.sleep(600)"
)


def _grandchild(log) -> int:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for line in log.read_text().splitlines():
            if line.startswith("grandchild "):
                return int(line.split()[1])
        time.sleep(0.05)
    raise AssertionError(f"no grandchild in {log.read_text()!r}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (ended, not reaped by its parent yet) is not running.
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(")")[-1].split()[0] != "Z"


def test_a_stop_escalates_to_sigkill_and_reaches_the_group_only_when_asked(tmp_path):
    log = tmp_path / "stubborn.log"
    alone = spawn_logged([sys.executable, "-c", STUBBORN], log)
    grandchild = _grandchild(log)
    assert os.getpgid(alone.pid) == alone.pid  # a session, so a group, of its own
    assert stop_process(alone, grace_seconds=0.5) == -signal.SIGKILL  # SIGTERM ignored: killed
    assert _alive(grandchild)  # its own pid only
    os.kill(grandchild, signal.SIGKILL)

    log = tmp_path / "group.log"
    leader = spawn_logged([sys.executable, "-c", STUBBORN], log)
    grandchild = _grandchild(log)
    stop_process(leader, grace_seconds=0.5, group=True)
    deadline = time.monotonic() + 10
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(grandchild)


def test_a_wait_fails_early_with_the_log_when_the_process_exits(tmp_path):
    log = tmp_path / "dies.log"
    process = spawn_logged([sys.executable, "-c", "print('bad config line 3'); raise SystemExit(3)"], log)
    started = time.monotonic()
    with pytest.raises(
        RuntimeError, match=r"(?s)the server \(pid \d+\) exited with 3 before it answered.*line 3"
    ):
        wait_ready(
            lambda: False,
            [("the server", process, log)],
            60,
            0.05,
            exited_before=" before it answered",
            failure=lambda last: TimeoutError("not this"),
        )
    assert time.monotonic() - started < 30


def test_a_wait_retries_the_probes_errors_then_names_the_last(tmp_path):
    process = spawn_logged([sys.executable, "-c", "import time; time.sleep(600)"], tmp_path / "sleeps.log")
    try:
        calls = []

        def probe() -> bool:
            calls.append(1)
            if len(calls) < 3:
                raise ConnectionRefusedError(f"try {len(calls)}")
            return True

        wait_ready(
            probe,
            [("s", process, None)],
            60,
            0.01,
            retry_on=(OSError,),
            failure=lambda last: AssertionError(last),
        )
        assert len(calls) == 3

        def refused() -> bool:
            raise ConnectionRefusedError("still refused")

        with pytest.raises(TimeoutError, match="still refused"):
            wait_ready(refused, [("s", process, None)], 0.3, 0.01, retry_on=(OSError,), failure=TimeoutError)
    finally:
        kill_process(process)
    assert process.returncode == -signal.SIGKILL
