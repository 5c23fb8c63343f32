"""The hourly landing claims like every log-driven run (issue 15): a heartbeat keeps its claim alive, a failure is
recorded and alerted once, and quarantined messages raise one weak alert with the count and the first reasons.

Real broker, real Spark, real job log; alerts go to a webhook receiver the test runs on loopback.
"""

from __future__ import annotations

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sharp_dagster.cdc.landing.done_markers import day_complete
from sharp_dagster.joblog import FAILURE, SUCCESS
from sharp_dagster.joblog.store import JobLog
from sharp_dagster_tests.cdc_support import KAFKA_ENV, QUIET, change

DAY = "2024-01-01"


class Hook:
    """A webhook receiver on 127.0.0.1 (free port) recording the JSON bodies it is sent."""

    def __init__(self):
        self.received: list[dict] = []
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers["Content-Length"]))
                hook.received.append(json.loads(body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def of_kind(self, kind: str) -> list[dict]:
        return [m for m in self.received if m["kind"] == kind]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture()
def hook(monkeypatch):
    receiver = Hook()
    monkeypatch.setenv("SHARP_ALERT_WEBHOOK_URL", receiver.url)
    yield receiver
    receiver.close()


@pytest.fixture()
def beats(monkeypatch):
    """The job ids `JobLog.heartbeat` was called for (the real heartbeat still runs)."""
    seen: list[str] = []
    real = JobLog.heartbeat

    def spy(self, handle):
        seen.append(handle.job_id)
        return real(self, handle)

    monkeypatch.setattr(JobLog, "heartbeat", spy)
    return seen


def _landings(jl, feed):
    rows = jl.recent(f"original_binlog/{feed.database}", limit=50)
    return sorted(rows, key=lambda r: r.job_start_time)


def _run_landing(feed):
    job = feed.defs.resolve_job_def("binlog_hourly")
    return job.execute_in_process(
        partition_key=f"{DAY}-23:00", instance=feed.instance, raise_on_error=False, run_config=QUIET
    )


def test_landing_heartbeats_and_alerts_quarantined_messages_once(own_feed, hook, beats, monkeypatch):
    from confluent_kafka import Producer

    from sharp_dagster.assets.cdc_assets import alert_quarantine
    from sharp_dagster.cdc.landing.land import LandingResult
    from sharp_dagster.logdriven import job_log

    # A short claim timeout: heartbeats every 0.5 s, so a landing of a few seconds must beat to keep its claim.
    monkeypatch.setenv("SHARP_CLAIM_TIMEOUT_S", "2")
    jl = job_log()
    producer = Producer({"bootstrap.servers": own_feed.bootstrap})
    for poison in (b"\x00\x01 definitely not json", b"[[[ nor this", b'{"hello": "no binlog fields"}'):
        producer.produce(own_feed.topic, poison, partition=0)
    assert producer.flush(60) == 0

    own_feed.land(DAY)
    [landing] = _landings(jl, own_feed)
    assert landing.status == SUCCESS
    assert beats.count(landing.job_id) >= 1, "the landing sent no heartbeat"
    [alert] = hook.of_kind("quarantine")
    details = alert["details"]
    assert details["severity"] == "weak" and details["quarantined"] == 3
    assert details["first_reasons"][0] == {"reason": "not JSON", "count": 2}, details
    assert sum(r["count"] for r in details["first_reasons"]) == 3
    assert details["job_id"] == landing.job_id and details["table"].endswith("_quarantine")
    assert f"{DAY}-23:00]: 3 message(s) quarantined" in alert["title"]
    assert not hook.of_kind("run_failure")

    # A landing that quarantines nothing does not alert; the same run's alert is never sent twice.
    own_feed.land(DAY, replay=False)
    assert [r.status for r in _landings(jl, own_feed)] == [SUCCESS, SUCCESS]
    again = LandingResult(
        topic=own_feed.topic,
        database=own_feed.database,
        quarantined=3,
        quarantine_reasons={"not JSON": 2},
    )
    assert alert_quarantine(jl, landing, "same-run", again) is False
    assert len(hook.of_kind("quarantine")) == 1

    # A day whose first change comes at 05:30: its quiet hours 00..04 are marked done too, so it can be merged.
    quiet_day, when = "2024-01-02", "2024-01-02 05:30:00"
    order = dict(order_id=900001, user_id=1, order_time=when, total_amount=1.0, updated_at=when)
    own_feed.send([change("orders", "c", 10**6, when, order_status="paid", **order)], quiet_day)
    own_feed.land(quiet_day, replay=False)
    warehouse = own_feed.defs.resources["spark"].store().warehouse_dir
    assert day_complete(warehouse, own_feed.database, quiet_day)


def test_landing_failure_is_recorded_and_alerted(own_feed, hook):
    from sharp_dagster.logdriven import job_log

    jl = job_log()
    bootstrap = os.environ.pop(KAFKA_ENV)  # no broker configured: the land step fails
    try:
        failed = _run_landing(own_feed)
    finally:
        os.environ[KAFKA_ENV] = bootstrap
    assert not failed.success
    [row] = _landings(jl, own_feed)
    assert row.status == FAILURE and f"{KAFKA_ENV} is not set" in row.error
    [alert] = hook.of_kind("run_failure")
    assert alert["title"] == f"original_binlog/{own_feed.database} [{DAY}-23:00] failed"
    assert alert["details"]["job_id"] == row.job_id and f"{KAFKA_ENV} is not set" in alert["details"]["error"]
    assert jl.running(f"original_binlog/{own_feed.database}") == [], "the failed landing released its claim"

    # The next landing (broker configured again) claims the same offsets and succeeds; no new failure alert.
    own_feed.land(DAY)
    assert [r.status for r in _landings(jl, own_feed)] == [FAILURE, SUCCESS]
    assert len(hook.of_kind("run_failure")) == 1
