"""Heartbeats: the claim timeout, the interval between beats, and the thread that sends them."""

from __future__ import annotations

import logging
import threading
from typing import Protocol

from sharp_dagster.joblog.errors import ClaimLost
from sharp_dagster.joblog.records import JobHandle
from sharp_dagster.redact import scrub_text
from sharp_dagster.settings import claim_timeout_text, heartbeat_interval_text

log = logging.getLogger(__name__)


class Beats(Protocol):
    """What the thread needs of the job log (`JobLog.heartbeat`): named here, not imported, as the job log's own
    claims build this thread (an import of `JobLog` would close a circle)."""

    def heartbeat(self, handle: JobHandle) -> None: ...


DEFAULT_CLAIM_TIMEOUT_S = 120.0


def claim_timeout_s() -> float:
    """`SHARP_CLAIM_TIMEOUT_S`: seconds without heartbeat after which a claim may be taken over."""
    raw = claim_timeout_text()
    if not raw:
        return DEFAULT_CLAIM_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"SHARP_CLAIM_TIMEOUT_S must be a number of seconds, got {raw!r}") from None
    if value <= 0:
        raise ValueError(f"SHARP_CLAIM_TIMEOUT_S must be positive, got {raw!r}")
    return value


MAX_HEARTBEAT_INTERVAL_S = 10.0


def heartbeat_interval_s(timeout_s: float | None = None) -> float:
    """Seconds between heartbeats: `SHARP_HEARTBEAT_INTERVAL_S`, else min(10, claim timeout / 4).

    Derived from the claim timeout (`timeout_s`, default `SHARP_CLAIM_TIMEOUT_S`) so that three beats can be lost
    before a healthy holder looks stale, whatever the timeout. An explicit interval must be below the timeout.
    """
    timeout = claim_timeout_s() if timeout_s is None else float(timeout_s)
    raw = heartbeat_interval_text()
    if not raw:
        return min(MAX_HEARTBEAT_INTERVAL_S, timeout / 4)
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"SHARP_HEARTBEAT_INTERVAL_S must be a number of seconds, got {raw!r}") from None
    if not 0 < value < timeout:
        raise ValueError(
            f"SHARP_HEARTBEAT_INTERVAL_S must be positive and below the claim timeout ({timeout:g}s), got {raw!r}"
        )
    return value


class Heartbeat:
    """A daemon thread calling `JobLog.heartbeat` every `interval_s` until stopped or the claim is lost."""

    def __init__(self, job_log: Beats, handle: JobHandle, interval_s: float):
        self._job_log = job_log
        self._handle = handle
        self._interval = interval_s
        self._stop = threading.Event()
        self._beating = threading.Lock()  # held for each beat's transaction (see `between_beats`)
        self._thread = threading.Thread(
            target=self._loop, name=f"heartbeat-{handle.job_schedule_id}", daemon=True
        )
        self.beats = 0

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                with self._beating:
                    self._job_log.heartbeat(self._handle)
                self.beats += 1
            except ClaimLost as exc:
                self._handle.lost = str(exc)
                log.error("%s", exc)
                return
            except Exception as exc:  # a database blip must not kill the run; the next beat retries
                log.warning("heartbeat of %s failed: %s", self._handle.job_schedule_id, scrub_text(str(exc)))

    def between_beats(self) -> threading.Lock:
        """A context manager that waits for a beat in flight to commit and holds the next one back.

        A fail point that freezes the process (SIGSTOP) takes it first: frozen inside a beat's transaction, the
        process would keep SQLite's write lock, and every other writer of the job log would wait on it.
        """
        return self._beating

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=max(5.0, self._interval * 2))
