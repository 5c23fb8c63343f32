"""Fencing: a run checks, right before its table commit, that it still holds its claim (`JobLog` inherits it).

Every claim carries a fencing token, its attempt number (`JobHandle.token`); see `store.py` for the guarantee.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select, update

from sharp_dagster.joblog.base import JobLogBase
from sharp_dagster.joblog.errors import StaleToken
from sharp_dagster.joblog.models import RUNNING, job_claim, job_log
from sharp_dagster.joblog.records import JobHandle


class FencingMixin(JobLogBase):
    """`assert_current`."""

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
        holder_with_token = (
            select(job_log.c.job_id)
            .where(job_log.c.job_schedule_id == handle.job_schedule_id, job_log.c.attempt == token)
            .scalar_subquery()
        )
        with self.engine.begin() as conn:
            held = conn.execute(
                update(job_claim)
                .where(
                    job_claim.c.job_schedule_id == handle.job_schedule_id,
                    job_claim.c.job_id == handle.job_id,
                    job_claim.c.job_id == holder_with_token,
                )
                .values(heartbeat_time=now)
            ).rowcount
            if held == 1:
                conn.execute(
                    update(job_log)
                    .where(job_log.c.job_id == handle.job_id, job_log.c.status == RUNNING)
                    .values(publish_time=now, heartbeat_time=now, last_update_time=now)
                )
        if held != 1:
            lost = self._lost_message(handle)
            handle.lost = handle.lost or lost
            raise StaleToken(f"{lost}; publishing with fencing token {token} refused")
        return now
