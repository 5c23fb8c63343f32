"""AlertSink: webhook delivery to a real local HTTP server, logging fallback, de-duplication, secret scrubbing."""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from sqlalchemy import select

from sharp_dagster.alerts import AlertSink
from sharp_dagster.db import make_engine
from sharp_dagster.joblog.models import alert_log
from sharp_dagster_tests.joblog.pgserver import free_port


class Hook:
    """A webhook receiver on 127.0.0.1 that records JSON bodies and answers with `status`."""

    def __init__(self):
        self.received: list[dict] = []
        self.status = 200
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                hook.received.append({"path": self.path, "json": json.loads(body)})
                self.send_response(hook.status)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/T0KEN-SECRET-PATH"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hook():
    receiver = Hook()
    yield receiver
    receiver.close()


def test_webhook_delivery_scrubs_secrets(hook, monkeypatch):
    monkeypatch.setenv("SHARP_ALERT_WEBHOOK_URL", hook.url)
    sink = AlertSink.from_env()
    delivered = sink.send(
        "run_failure",
        "dwd/orders:2024-01-02",
        "dwd/orders 2024-01-02 failed reading postgresql://etl:hunter2@db/shop",
        {"error": "login failed, password=hunter2", "api_token": "abc", "rows": 12, "when": object()},
    )
    assert delivered is True
    [message] = hook.received
    body = message["json"]
    assert body["kind"] == "run_failure" and body["dedup_key"] == "dwd/orders:2024-01-02"
    assert body["details"]["rows"] == 12 and body["details"]["api_token"] == "***"
    assert "hunter2" not in json.dumps(body) and "etl:***@db" in body["title"]


def test_logging_fallback(caplog, monkeypatch):
    monkeypatch.delenv("SHARP_ALERT_WEBHOOK_URL", raising=False)
    with caplog.at_level(logging.WARNING, logger="sharp_dagster.alerts"):
        assert AlertSink.from_env().send("dqc", "k1", "rule failed", {"rule": "not_null(id)"}) is True
    assert "[dqc] rule failed" in caplog.text and "not_null(id)" in caplog.text


def test_dedup_through_alert_log(db_url, hook):
    engine = make_engine(db_url)
    sink = AlertSink(hook.url, engine=engine)
    assert sink.send("run_failure", "dwd/orders:2024-01-02", "failed", {"n": 1}) is True
    assert sink.send("run_failure", "dwd/orders:2024-01-02", "failed again", {"n": 2}) is False
    assert AlertSink(hook.url, engine=engine).send("run_failure", "dwd/orders:2024-01-02", "x", {}) is False
    assert sink.send("run_failure", "dwd/orders:2024-01-03", "failed", {}) is True
    assert [m["json"]["dedup_key"] for m in hook.received] == [
        "dwd/orders:2024-01-02",
        "dwd/orders:2024-01-03",
    ]
    with engine.connect() as conn:
        row = conn.execute(select(alert_log).where(alert_log.c.dedup_key == "dwd/orders:2024-01-02")).one()
    assert row.count == 3 and row.first_sent_at is not None and row.kind == "run_failure"
    assert json.loads(row.payload)["title"] == "x"


def test_failed_delivery_is_logged_not_raised_and_retried(db_url, hook, caplog):
    engine = make_engine(db_url)
    sink = AlertSink(hook.url, engine=engine, timeout_s=2)
    hook.status = 500
    with caplog.at_level(logging.WARNING, logger="sharp_dagster.alerts"):
        assert sink.send("run_failure", "k", "failed", {}) is False
    assert "answered HTTP 500" in caplog.text and "T0KEN-SECRET-PATH" not in caplog.text
    hook.status = 200
    assert sink.send("run_failure", "k", "failed", {}) is True  # released after the failure: tried again
    assert sink.send("run_failure", "k", "failed", {}) is False
    assert len(hook.received) == 2

    caplog.clear()
    dead = AlertSink(f"http://127.0.0.1:{free_port()}/hook?token=zzz", timeout_s=1)
    with caplog.at_level(logging.WARNING, logger="sharp_dagster.alerts"):
        assert dead.send("run_failure", "k2", "failed", {}) is False
    assert "unreachable" in caplog.text and "zzz" not in caplog.text
