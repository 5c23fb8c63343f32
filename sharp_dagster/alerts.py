"""Alerts of the platform (failed runs, stale claims, data-quality failures): one small sink, de-duplicated.

`AlertSink.from_env()` posts JSON to `SHARP_ALERT_WEBHOOK_URL` when it is set (short timeout), else writes to the
`sharp_dagster.alerts` logger. Delivery problems are logged, never raised into the pipeline. With an engine, each
`dedup_key` is delivered once (recorded in the `alert_log` table, shared by all processes); later sends of the
same key only count. To be reminded again, put the day (or the run) into the key. Payloads are scrubbed of
secrets (URL passwords, token / password fields) before they leave the process.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import requests
from sqlalchemy import insert, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError

from sharp_dagster.joblog.migrate import ensure_schema
from sharp_dagster.joblog.models import alert_log
from sharp_dagster.joblog.store import utcnow
from sharp_dagster.redact import scrub, scrub_text
from sharp_dagster.settings import alert_webhook_url

log = logging.getLogger("sharp_dagster.alerts")

DEFAULT_TIMEOUT_S = 5.0


def _where(url: str) -> str:
    """Only scheme and host of a webhook URL: its path or query often is the secret."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname or '?'}{':' + str(parts.port) if parts.port else ''}"


class AlertSink:
    """Send alerts to a webhook or to the log, de-duplicated through `alert_log` when an engine is given."""

    def __init__(
        self,
        webhook_url: str | None = None,
        engine: Engine | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ):
        self.webhook_url = webhook_url or None
        self.engine = engine
        self.timeout_s = timeout_s
        if engine is not None:
            ensure_schema(engine)

    @classmethod
    def from_env(cls, engine: Engine | None = None) -> AlertSink:
        """Webhook from `SHARP_ALERT_WEBHOOK_URL` (else the logger); de-duplicated when `engine` is given."""
        return cls(alert_webhook_url(), engine)

    def send(self, kind: str, dedup_key: str, title: str, details: Mapping[str, Any] | None = None) -> bool:
        """Deliver an alert unless `dedup_key` was already delivered; returns whether it was delivered now."""
        payload = {
            "kind": kind,
            "dedup_key": dedup_key,
            "title": scrub_text(title),
            "details": scrub(dict(details or {})),
        }
        payload = json.loads(json.dumps(payload, default=str))  # datetimes and the like as text
        if self.engine is None:
            return self._deliver(payload)
        try:
            first = self._reserve(kind, dedup_key, payload)
        except Exception as exc:  # the alert database is down: still tell someone
            log.warning("alert de-duplication unavailable (%s); delivering anyway", scrub_text(str(exc)))
            return self._deliver(payload)
        if not first:
            return False
        delivered = self._deliver(payload)
        if not delivered:
            self._release(dedup_key)
        return delivered

    # The key is reserved (first_sent_at set) by a compare-and-set, so two processes sending the same alert
    # at once deliver it once; a failed delivery releases the key so the next send tries again.
    def _reserve(self, kind: str, dedup_key: str, payload: dict[str, Any]) -> bool:

        now = utcnow()
        text = json.dumps(payload, default=str)
        try:
            with self.engine.begin() as conn:
                conn.execute(
                    insert(alert_log).values(
                        dedup_key=dedup_key,
                        first_sent_at=None,
                        last_seen_at=now,
                        count=0,
                        kind=kind,
                        payload=text,
                    )
                )
        except IntegrityError:
            pass
        with self.engine.begin() as conn:
            conn.execute(
                update(alert_log)
                .where(alert_log.c.dedup_key == dedup_key)
                .values(count=alert_log.c.count + 1, last_seen_at=now, payload=text)
            )
            reserved = conn.execute(
                update(alert_log)
                .where(alert_log.c.dedup_key == dedup_key, alert_log.c.first_sent_at.is_(None))
                .values(first_sent_at=now)
            ).rowcount
        return reserved == 1

    def _release(self, dedup_key: str) -> None:

        try:
            with self.engine.begin() as conn:
                conn.execute(
                    update(alert_log).where(alert_log.c.dedup_key == dedup_key).values(first_sent_at=None)
                )
        except Exception as exc:
            log.warning("could not release alert %s for a later retry: %s", dedup_key, scrub_text(str(exc)))

    def _deliver(self, payload: dict[str, Any]) -> bool:
        if self.webhook_url is None:
            log.warning(
                "[%s] %s %s", payload["kind"], payload["title"], json.dumps(payload["details"], default=str)
            )
            return True

        try:
            response = requests.post(self.webhook_url, json=payload, timeout=self.timeout_s)
        except requests.RequestException as exc:
            log.warning("alert webhook %s unreachable: %s", _where(self.webhook_url), type(exc).__name__)
            return False
        if response.status_code >= 300:
            log.warning("alert webhook %s answered HTTP %s", _where(self.webhook_url), response.status_code)
            return False
        return True
