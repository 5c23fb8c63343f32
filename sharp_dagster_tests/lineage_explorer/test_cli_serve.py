"""`sharp-dagster lineage serve` as a user runs it: a subprocess on a free loopback port, stopped by its pid."""

from __future__ import annotations

import http.client
import os
import re
import signal
import subprocess
import sys
import time

from sharp_dagster.settings import REPO_ROOT
from sharp_dagster_tests.lineage_explorer.conftest import get

STARTUP_TIMEOUT = 120  # builds the project graph (parses every SQL file) first; the machine is shared


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "sharp_dagster.cli", "lineage", *args]


def _status_for_host(port: int, host: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.putrequest("GET", "/api/tables", skip_host=True)
        conn.putheader("Host", host)
        conn.endheaders()
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()


def test_serve_subcommand_answers_and_stops():
    proc = subprocess.Popen(
        _cli("serve", "--port", "0", "--allow-host", "lineage.corp.example"),
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        line = ""
        while time.monotonic() < deadline and proc.poll() is None:
            line = proc.stdout.readline()
            if "serving" in line:
                break
        match = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        assert match, (
            f"no URL printed: {line!r}; stderr: {proc.stderr.read() if proc.poll() is not None else ''}"
        )
        url = match.group(0)
        status, body, _ = get(f"{url}/api/graph?table=ads/gmv_by_category&direction=up&depth=1")
        assert status == 200
        assert body["vertices"] == [
            "urn:sharp:dataset:spark:ads.gmv_by_category",
            "urn:sharp:dataset:spark:dwd.order_detail",
        ]
        status, page, _ = get(f"{url}/table/ads/gmv_by_category")
        assert status == 200 and "echarts.min.js" in page
        # The Host header decides: the configured name is answered, any other name is not (DNS rebinding).
        port = int(match.group(1))
        assert _status_for_host(port, "lineage.corp.example") == 200
        assert _status_for_host(port, f"attacker.example:{port}") == 403
    finally:
        os.kill(proc.pid, signal.SIGINT)  # our own child, by its pid: serve() closes its socket on Ctrl-C
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    assert proc.returncode == 0


def test_serve_refuses_a_bad_port():
    proc = subprocess.run(
        _cli("serve", "--port", "70000"), cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode != 0
    assert "--port" in proc.stderr and "70000" in proc.stderr
