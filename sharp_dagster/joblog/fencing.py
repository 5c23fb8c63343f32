"""Fencing: a run checks, right before its table commit, that it still holds its claim (`JobLog` inherits it).

Every claim carries a fencing token, its attempt number (`JobHandle.token`); see `store.py` for the guarantee.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import Connection, select, update

from sharp_dagster.joblog.base import JobLogBase
from sharp_dagster.joblog.errors import StaleToken
from sharp_dagster.joblog.models import RUNNING, job_claim, job_log
from sharp_dagster.joblog.records import JobHandle


class FencingMixin(JobLogBase):
    """`assert_current`, `assert_current_all`."""

    def assert_current(self, handle: JobHandle, token: int | None = None) -> datetime:
        """Check that the period is still claimed with fencing token `token` (default: the handle's) and record
        the publish, in one transaction; returns the publish time. Call it right before the table commit.

        Raises `StaleToken` (a `ClaimLost`), changing nothing, when the claim was taken over, released, or is held
        with another token. The check is a write (the claim's heartbeat is refreshed, only where the holder's
        attempt equals the token), so the claim row stays locked until the publish is recorded: a concurrent
        takeover either commits first (this check then fails) or waits and then finds a fresh heartbeat.
        """
        token = handle.token if token is None else int(token)
        now = self.now()
        with self.engine.begin() as conn:
            held = self._fence(conn, handle, token, now)
        if not held:
            lost = self._lost_message(handle)
            handle.lost = handle.lost or lost
            raise StaleToken(f"{lost}; publishing with fencing token {token} refused")
        return now

    def assert_current_all(self, handles: Sequence[JobHandle]) -> datetime:
        """`assert_current` of several claims (a range run's periods) in ONE transaction: either every claim is
        still held with its handle's token and every publish is recorded, or nothing changes and `StaleToken`
        names the first claim lost."""
        now = self.now()
        with self.engine.connect() as conn:
            with conn.begin() as tx:
                lost = next((h for h in handles if not self._fence(conn, h, h.token, now)), None)
                if lost is not None:
                    tx.rollback()  # the publishes recorded so far in this transaction are undone
        if lost is not None:
            message = self._lost_message(lost)
            lost.lost = lost.lost or message
            raise StaleToken(f"{message}; publishing with fencing token {lost.token} refused")
        return now

    @staticmethod
    def _fence(conn: Connection, handle: JobHandle, token: int, now: datetime) -> bool:
        """In `conn`'s transaction: refresh the claim's heartbeat where it is held by `handle` with `token`, and
        record the publish time; False (nothing written) when the claim is not held so."""
        holder_with_token = (
            select(job_log.c.job_id)
            .where(job_log.c.job_schedule_id == handle.job_schedule_id, job_log.c.attempt == token)
            .scalar_subquery()
        )
        held = conn.execute(
            update(job_claim)
            .where(
                job_claim.c.job_schedule_id == handle.job_schedule_id,
                job_claim.c.job_id == handle.job_id,
                job_claim.c.job_id == holder_with_token,
            )
            .values(heartbeat_time=now)
        ).rowcount
        if held != 1:
            return False
        conn.execute(
            update(job_log)
            .where(job_log.c.job_id == handle.job_id, job_log.c.status == RUNNING)
            .values(publish_time=now, heartbeat_time=now, last_update_time=now)
        )
        return True
