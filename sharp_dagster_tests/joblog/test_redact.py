"""Secrets never leave the process: every URL form, known secret values, the job log, alerts, Dagster Failures."""

from __future__ import annotations

import logging
import socket
from datetime import datetime

import pytest

from sharp_dagster.redact import MASK, known_secrets, redact_url, scrub, scrub_text

SECRET_ENV = ("SHARP_CDC_MYSQL_PASSWORD", "SHARP_LOG_DB_URL", "SHARP_ALERT_WEBHOOK_URL")


@pytest.fixture(autouse=True)
def _no_configured_secrets(monkeypatch):
    for name in SECRET_ENV:
        monkeypatch.delenv(name, raising=False)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# (URL as written, the secret pieces that must not survive, what must still be shown)
URL_FORMS = [
    ("postgresql://etl:s3cretPw@db:5432/log", ["s3cretPw"], "postgresql://etl:***@db:5432/log"),
    (
        "postgresql+psycopg://etl@db/log?password=Qu3ryPw&sslmode=require",
        ["Qu3ryPw"],
        "postgresql+psycopg://etl@db/log?password=***&sslmode=require",
    ),
    ("mysql+pymysql://etl@db:3306/shop?pwd=Pwd0nly", ["Pwd0nly"], "mysql+pymysql://etl@db:3306/shop?pwd=***"),
    (
        "mysql+pymysql://etl:p@ssW0rd@db:3306/shop",
        ["p@ssW0rd", "ssW0rd"],
        "mysql+pymysql://etl:***@db:3306/shop",
    ),
    (
        "postgresql://etl:a:b/c?d@e#f@db.example.com:5432/log",
        ["a:b/c?d@e#f", "b/c?d", "e#f"],
        "postgresql://etl:***@db.example.com:5432/log",
    ),
    (
        "postgresql://etl:P%40ss%2Fw%3A%3Fx%25@db/log",
        ["P%40ss%2Fw%3A%3Fx%25", "P@ss/w:?x%"],
        "postgresql://etl:***@db/log",
    ),
    (
        "postgresql://etl@db/log?password=Enc%40%26Pw",
        ["Enc%40%26Pw", "Enc@&Pw"],
        "postgresql://etl@db/log?password=***",
    ),
    (
        "jdbc:mysql://db:3306/shop?user=etl&password=JdbcPw1",
        ["JdbcPw1"],
        "jdbc:mysql://db:3306/shop?user=etl",
    ),
    ("https://etl:HttpPw99@hooks.example.org/x", ["HttpPw99"], "https://etl:***@hooks.example.org/x"),
]


@pytest.mark.parametrize(("url", "secrets", "shown"), URL_FORMS, ids=[u for u, *_ in URL_FORMS])
def test_every_url_form_is_scrubbed_in_text(url, secrets, shown):
    text = f"connect to {url} failed (timeout). Retrying {url}."
    out = scrub_text(text)
    for secret in secrets:
        assert secret not in out, out
    assert shown in out, out
    assert out.startswith("connect to ") and "failed (timeout). Retrying" in out
    assert secrets[0] not in redact_url(url)


def test_password_repeated_outside_its_url_is_masked_too():
    text = 'postgresql://etl:Rep3atMe@db/log: FATAL password "Rep3atMe" rejected'
    assert "Rep3atMe" not in scrub_text(text)


def test_text_without_secrets_is_left_alone():
    text = "dwd/orders [2024-01-01] not run: earlier partition 2023-12-31 is FAILURE; see http://localhost:3000/runs"
    assert scrub_text(text) == text
    assert redact_url("sqlite:////tmp/data/sharp_log.db") == "sqlite:////tmp/data/sharp_log.db"


def test_known_secret_values_are_masked_anywhere(monkeypatch):
    monkeypatch.setenv("SHARP_CDC_MYSQL_PASSWORD", "Cdc/Pa55 w@rd")
    monkeypatch.setenv("SHARP_LOG_DB_URL", "postgresql://etl@db/log?password=L0g%40Pw")
    monkeypatch.setenv("SHARP_ALERT_WEBHOOK_URL", "https://hooks.example.org/services/T01/B02/SeCrEt")
    text = (
        "pymysql: Access denied, tried 'Cdc/Pa55 w@rd' (Cdc%2FPa55%20w%40rd); log db said L0g@Pw; "
        "posting to https://hooks.example.org/services/T01/B02/SeCrEt failed: /services/T01/B02/SeCrEt 404"
    )
    out = scrub_text(text)
    for leak in ("Cdc/Pa55 w@rd", "Cdc%2FPa55%20w%40rd", "L0g@Pw", "SeCrEt"):
        assert leak not in out, out
    assert out.count(MASK) >= 5
    assert "L0g@Pw" in known_secrets() and "L0g%40Pw" in known_secrets()


def test_short_known_secrets_stay_masked_inside_urls(monkeypatch):
    monkeypatch.setenv("SHARP_CDC_MYSQL_PASSWORD", "ab")  # too short to mask as a bare word
    assert scrub_text("about a table") == "about a table"
    assert "ab@" not in scrub_text("mysql://root:ab@db/shop")
    assert scrub_text("failed", extra_secrets=["x1"]) == "failed"
    assert scrub_text("pw x1 leaked", extra_secrets=["x1"]) == "pw *** leaked"


def test_payloads_are_scrubbed():
    payload = {"error": "at mysql://etl@db/shop?password=Pl0ad", "api_key": "k", "n": 3}
    assert scrub(payload) == {"error": "at mysql://etl@db/shop?password=***", "api_key": MASK, "n": 3}


def test_job_log_error_columns_are_scrubbed(job_log):
    from sharp_dagster.periods import PeriodSpec

    period = PeriodSpec("daily", datetime(2024, 1, 1)).period_for_key("2024-03-01")
    handle = job_log.claim("dwd/secretive", period, "run-S")
    with pytest.raises(RuntimeError):
        with job_log.step(handle, "read") as rec:
            rec.info("reading postgresql://etl:St3pOut@db/src")
            raise RuntimeError("no route: mysql://etl:R@wAt@db:3306/shop?pwd=Q1")
    job_log.finish(handle, "FAILURE", error="JDBC jdbc:postgresql://db/x?password=F1n1sh failed")
    row = job_log.get(handle.job_id)
    stored = " ".join(filter(None, [row.error, row.steps[0].error, row.steps[0].output]))
    for leak in ("St3pOut", "R@wAt", "wAt", "pwd=Q1", "F1n1sh"):
        assert leak not in stored, stored


def test_alerts_are_scrubbed(caplog, monkeypatch):
    from sharp_dagster.alerts import AlertSink

    monkeypatch.setenv("SHARP_CDC_MYSQL_PASSWORD", "Al3rtCdcPw")
    with caplog.at_level(logging.WARNING, logger="sharp_dagster.alerts"):
        AlertSink().send(
            "run_failure",
            "k1",
            "ods/orders failed at mysql://etl:Ti@tle@db/shop",
            {"error": "pymysql said Al3rtCdcPw; url postgresql://etl@db/log?password=Det%40il"},
        )
    logged = caplog.text
    assert "run_failure" in logged
    for leak in ("Ti@tle", "tle@db", "Al3rtCdcPw", "Det%40il", "Det@il"):
        assert leak not in logged, logged


@pytest.mark.parametrize(
    ("url", "leaks"),
    [
        (
            "postgresql+psycopg://etl@127.0.0.1:{port}/joblog?password=Fa1l%40Pw%2F",
            ["Fa1l%40Pw%2F", "Fa1l@Pw/"],
        ),
        ("postgresql+psycopg://etl:Fa1l@Pw:x/y@127.0.0.1:{port}/joblog", ["Fa1l@Pw", "Pw:x/y"]),
        ("postgresql+psycopg://etl:Fa1l%3APw@127.0.0.1:{port}/joblog", ["Fa1l%3APw", "Fa1l:Pw"]),
    ],
    ids=["query-password", "raw-at-colon-slash", "percent-encoded"],
)
def test_a_run_failure_carries_no_secret(monkeypatch, url, leaks):
    """The first thing a log-driven run does is reach the job log; with the database down, the Dagster
    Failure's description (event log, run index, compute logs) shows the URL without any of its secrets."""
    from dagster import Failure

    from sharp_dagster.logdriven import job_log_or_fail

    monkeypatch.setenv("SHARP_LOG_DB_URL", url.format(port=free_port()))  # nothing listens there
    with pytest.raises(Failure) as failure:
        job_log_or_fail()
    description = failure.value.description
    assert description.startswith("job log unavailable, nothing was written:")
    assert "127.0.0.1" in description or "%40" in description or "raw '@'" in description
    for leak in leaks:
        assert leak not in description, description
        assert leak not in str(failure.value) and failure.value.__cause__ is None
