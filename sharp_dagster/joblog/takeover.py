"""Taking over a stale RUNNING job by hand (`sharp-dagster log takeover`); `JobLog` inherits it.

A claim takes over a stale holder itself (`claims.py`); this is the operator's way to end a job whose process is
gone, compare-and-set on the heartbeat judged stale so that a holder that is still alive keeps its claim.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import delete, update

from sharp_dagster.joblog.base import JobLogBase
from sharp_dagster.joblog.errors import JobNotFound, NothingChanged, NotRunning, StillAlive, error_text
from sharp_dagster.joblog.heartbeat import claim_timeout_s
from sharp_dagster.joblog.models import FAILURE, RUNNING, job_claim, job_log
from sharp_dagster.joblog.records import JobRun


class TakeoverMixin(JobLogBase):
    """`takeover` of a stale job."""

    def takeover(
        self,
        job_id: str,
        reason: str,
        *,
        force: bool = False,
        stale_after_s: float | None = None,
    ) -> JobRun:
        """End a stale RUNNING job: FAILURE with `reason`, its claim released. Returns the updated row.

        Refuses (`StillAlive`) a job whose heartbeat is younger than the claim timeout unless `force`.
        """
        row = self.get(job_id)
        if row is None:
            raise JobNotFound(f"no job with job_id {job_id!r} in the job log")
        if row.status != RUNNING:
            raise NotRunning(
                f"job {job_id} ({row.job_name} {row.partition_key or row.range_start}) is {row.status}, not RUNNING"
            )
        holder = self._claim_row(row.job_schedule_id)
        beat = holder.heartbeat_time if holder is not None and holder.job_id == job_id else row.heartbeat_time
        stale = claim_timeout_s() if stale_after_s is None else float(stale_after_s)
        now = self.now()
        if not force and beat is not None and (now - beat).total_seconds() <= stale:
            raise StillAlive(
                f"job {job_id} (run {row.run_id}) sent a heartbeat {(now - beat).total_seconds():.0f}s ago "
                f"(stale after {stale:g}s); force the takeover if that run is really gone"
            )
        holds = holder is not None and holder.job_id == job_id
        if self.takeover_hook is not None:
            self.takeover_hook(holder if holds else row)
        ended = 0
        try:
            self._end_stale(row, holder if holds else None, force, reason, now)
            ended = 1
        except NothingChanged:
            pass
        if ended != 1:
            latest = self.get(job_id)
            if latest is not None and latest.status == RUNNING:
                raise StillAlive(
                    f"job {job_id} (run {row.run_id}) sent a heartbeat while it was being taken over; "
                    "nothing was changed"
                )
            raise NotRunning(f"job {job_id} finished while it was being taken over")
        result = self.get(job_id)
        assert result is not None
        return result

    def _end_stale(self, row: JobRun, holder: Any, force: bool, reason: str, now: datetime) -> None:
        """`takeover`'s transaction: release the claim and end the row, or raise `NothingChanged` (rolled back).

        Compare-and-set on the heartbeat judged stale (unless forced): a heartbeat that arrived since then makes
        the DELETE match nothing, and the job is left running and claimed.
        """
        with self.engine.begin() as conn:
            if holder is not None:
                where = [job_claim.c.job_schedule_id == row.job_schedule_id, job_claim.c.job_id == row.job_id]
                if not force:
                    where.append(job_claim.c.heartbeat_time == holder.heartbeat_time)
                if conn.execute(delete(job_claim).where(*where)).rowcount != 1:
                    raise NothingChanged
            where = [job_log.c.job_id == row.job_id, job_log.c.status == RUNNING]
            if not force and holder is None:
                where.append(
                    job_log.c.heartbeat_time.is_(None)
                    if row.heartbeat_time is None
                    else job_log.c.heartbeat_time == row.heartbeat_time
                )
            ended = conn.execute(
                update(job_log)
                .where(*where)
                .values(status=FAILURE, error=error_text(reason), job_end_time=now, last_update_time=now)
            ).rowcount
            if ended != 1:
                raise NothingChanged  # rolls the claim's DELETE back too
