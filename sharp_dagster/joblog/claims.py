"""Claiming a period, heartbeats, finishing (`JobLog` inherits them); `store.py` states the guarantees.

`JobLog.claim` goes in named steps: `ClaimRequest.of` checks the arguments, `_claim_free` inserts the claim row
(refused by its primary key while the period is held), `_refuse_if_alive` raises `ClaimRefused` for a holder with
a fresh heartbeat, and `_take_over_stale` takes a stale holder's claim over by compare-and-set.
"""

from __future__ import annotations

import logging
import traceback
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from sharp_dagster.joblog import spans as spans_mod
from sharp_dagster.joblog.base import JobLogBase
from sharp_dagster.joblog.errors import ClaimLost, ClaimRefused, JobLogError, error_text
from sharp_dagster.joblog.heartbeat import Heartbeat, claim_timeout_s, heartbeat_interval_s
from sharp_dagster.joblog.models import (
    DONE_STATUSES,
    FAILURE,
    FINAL_STATUSES,
    INCREMENTAL_TYPES,
    RANGE_MAX_CHARS,
    RUNNING,
    SUCCESS,
    TIMEWINDOW,
    job_claim,
    job_log,
    step_log,
)
from sharp_dagster.joblog.records import ClaimWindow, JobHandle, fmt_time, schedule_id_for
from sharp_dagster.redact import scrub_text

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClaimRequest:
    """The checked arguments of one `JobLog.claim`: what its claim row, job_log row and handle are made of."""

    job_name: str
    schedule_id: str
    run_id: str | None
    partition_key: str | None
    range_start: str
    range_end: str | None
    incremental_type: str
    window: ClaimWindow
    project_name: str | None
    application_id: str | None
    current_file: str | None

    @classmethod
    def of(
        cls,
        job_name: str,
        window: ClaimWindow,
        run_id: str | None,
        partition_key: str | None,
        incremental_type: str | None,
        project_name: str | None,
        application_id: str | None,
        current_file: str | None,
    ) -> ClaimRequest:
        """Check the arguments (`ValueError`) and fill in what the window knows."""
        if not job_name or len(job_name) > 128:
            raise ValueError(f"job_name must be 1..128 characters, got {job_name!r}")
        range_start = window.range_start
        range_end = window.range_end
        for label, value in (("data_range_start", range_start), ("data_range_end", range_end)):
            if value is not None and len(value) > RANGE_MAX_CHARS:
                raise ValueError(
                    f"{job_name}: {label} is {len(value)} characters, the limit is {RANGE_MAX_CHARS}"
                )
        inc_type = incremental_type or getattr(window, "incremental_type", None) or TIMEWINDOW
        if inc_type not in INCREMENTAL_TYPES:
            raise ValueError(f"incremental_type must be one of {INCREMENTAL_TYPES}, got {inc_type!r}")
        return cls(
            job_name=job_name,
            schedule_id=schedule_id_for(job_name, range_start),
            run_id=run_id,
            partition_key=partition_key or getattr(window, "partition_key", None),
            range_start=range_start,
            range_end=range_end,
            incremental_type=inc_type,
            window=window,
            project_name=project_name,
            application_id=application_id,
            current_file=current_file,
        )

    def handle(self, job_id: str, attempt: int, now: datetime, took_over: str | None = None) -> JobHandle:
        return JobHandle(
            job_id=job_id,
            job_name=self.job_name,
            job_schedule_id=self.schedule_id,
            run_id=self.run_id,
            partition_key=self.partition_key,
            range_start=self.range_start,
            range_end=self.range_end,
            incremental_type=self.incremental_type,
            period_minutes=int(self.window.period_minutes),
            attempt=attempt,
            started_at=now,
            took_over_job_id=took_over,
        )

    def record_attempt(self, conn: Connection, job_id: str, now: datetime) -> int:
        """Insert the RUNNING job_log row of a new attempt (previous attempt + 1) and take the period out of the
        asset's success spans; returns the attempt number."""
        schedule_id = self.schedule_id
        attempt = (
            conn.execute(
                select(func.max(job_log.c.attempt)).where(job_log.c.job_schedule_id == schedule_id)
            ).scalar()
            or 0
        ) + 1
        conn.execute(
            insert(job_log).values(
                job_id=job_id,
                job_name=self.job_name,
                job_period=int(self.window.period_minutes),
                job_schedule_id=schedule_id,
                data_range_start=self.range_start,
                data_range_end=self.range_end,
                job_start_time=now,
                status=RUNNING,
                create_time=now,
                last_update_time=now,
                incremental_type=self.incremental_type,
                current_file=self.current_file,
                application_id=self.application_id,
                project_name=self.project_name,
                run_id=self.run_id,
                partition_key=self.partition_key,
                heartbeat_time=now,
                attempt=attempt,
            )
        )
        if self.incremental_type == TIMEWINDOW and self.range_end is not None:
            spans_mod.remove_period(conn, self.job_name, self.range_start, self.range_end, now)
        return attempt


def _release(conn: Connection, handle: JobHandle) -> int:
    """Delete the claim where `handle` holds it; 1 when it did, 0 when the claim is another attempt's or gone."""
    return conn.execute(
        delete(job_claim).where(
            job_claim.c.job_schedule_id == handle.job_schedule_id, job_claim.c.job_id == handle.job_id
        )
    ).rowcount


class ClaimsMixin(JobLogBase):
    """Claim, heartbeat, finish, withdraw."""

    def claim(
        self,
        job_name: str,
        window: ClaimWindow,
        run_id: str | None,
        partition_key: str | None = None,
        incremental_type: str | None = None,
        project_name: str | None = None,
        *,
        stale_after_s: float | None = None,
        application_id: str | None = None,
        current_file: str | None = None,
    ) -> JobHandle:
        """Claim one period of `job_name` for `run_id` and record it RUNNING (attempt = previous + 1).

        Raises `ClaimRefused` (naming the holder's run id and since when) while another run holds the period with
        a fresh heartbeat; a holder silent for `stale_after_s` is taken over and its row marked FAILURE.
        """
        request = ClaimRequest.of(
            job_name,
            window,
            run_id,
            partition_key,
            incremental_type,
            project_name,
            application_id,
            current_file,
        )
        stale = claim_timeout_s() if stale_after_s is None else float(stale_after_s)
        self._ensure_asset(job_name)
        for _ in range(10):
            handle = self._claim_free(request)
            if handle is not None:
                return handle
            holder = self._claim_row(request.schedule_id)  # the period is held: look at the holder
            if holder is None:
                continue  # the holder finished in between: claim again
            now = self.now()
            self._refuse_if_alive(request, holder, now, stale)
            handle = self._take_over_stale(request, holder, now)
            if handle is not None:
                return handle
            # The holder sent a heartbeat, finished, or someone else took over: look again (a live holder now
            # refuses this claim with a fresh heartbeat).
        raise JobLogError(f"could not claim {request.schedule_id}: it changed hands ten times while trying")

    def _claim_free(self, request: ClaimRequest) -> JobHandle | None:
        """Claim a free period: insert its claim row and the attempt's job_log row. None when the period is held
        (the claim row's primary key refused the insert)."""
        now = self.now()
        job_id = str(uuid.uuid4())
        try:
            with self.engine.begin() as conn:
                conn.execute(
                    insert(job_claim).values(
                        job_schedule_id=request.schedule_id,
                        job_id=job_id,
                        run_id=request.run_id,
                        claimed_at=now,
                        heartbeat_time=now,
                    )
                )
                attempt = request.record_attempt(conn, job_id, now)
        except IntegrityError:
            return None
        return request.handle(job_id, attempt, now)

    @staticmethod
    def _refuse_if_alive(request: ClaimRequest, holder: Any, now: datetime, stale: float) -> None:
        """Raise `ClaimRefused` when the holder's last heartbeat is at most `stale` seconds old."""
        age = (now - holder.heartbeat_time).total_seconds()
        if age <= stale:
            raise ClaimRefused(
                f"{request.job_name} period {request.partition_key or request.range_start} is held by run "
                f"{holder.run_id} (job {holder.job_id}) since {fmt_time(holder.claimed_at)} UTC; last heartbeat "
                f"{fmt_time(holder.heartbeat_time)} UTC ({age:.0f}s ago, stale after {stale:g}s)",
                holder_run_id=holder.run_id,
                holder_job_id=holder.job_id,
                since=holder.claimed_at,
            )

    def _take_over_stale(self, request: ClaimRequest, holder: Any, now: datetime) -> JobHandle | None:
        """Take the claim of a holder judged stale, mark its row FAILURE and record the new attempt, in one
        transaction. None when the holder changed since it was read (nothing is changed then)."""
        job_id = str(uuid.uuid4())
        reason = (
            f"heartbeat lost since {fmt_time(holder.heartbeat_time)} UTC, taken over by run {request.run_id} "
            f"(job {job_id}) at {fmt_time(now)} UTC"
        )
        if self.takeover_hook is not None:
            self.takeover_hook(holder)
        with self.engine.begin() as conn:
            # Compare-and-set on what was judged stale: the holder's job id AND the heartbeat time read above.
            # A heartbeat that landed since then changed heartbeat_time, so this matches no row.
            taken = conn.execute(
                update(job_claim)
                .where(
                    job_claim.c.job_schedule_id == request.schedule_id,
                    job_claim.c.job_id == holder.job_id,
                    job_claim.c.heartbeat_time == holder.heartbeat_time,
                )
                .values(job_id=job_id, run_id=request.run_id, claimed_at=now, heartbeat_time=now)
            ).rowcount
            if taken == 1:
                conn.execute(
                    update(job_log)
                    .where(job_log.c.job_id == holder.job_id, job_log.c.status == RUNNING)
                    .values(status=FAILURE, error=reason, job_end_time=now, last_update_time=now)
                )
                attempt = request.record_attempt(conn, job_id, now)
        if taken != 1:
            return None
        log.warning("%s: %s", request.schedule_id, reason)
        return request.handle(job_id, attempt, now, took_over=holder.job_id)

    def inspect_claim(self, job_schedule_id: str) -> Any:
        """The claim row of a period (job_id, run_id, claimed_at, heartbeat_time), or None when it is free."""
        return self._claim_row(job_schedule_id)

    def heartbeat(self, handle: JobHandle) -> None:
        """Refresh the claim; raises `ClaimLost` when another run has taken it over."""
        now = self.now()
        with self.engine.begin() as conn:
            kept = conn.execute(
                update(job_claim)
                .where(
                    job_claim.c.job_schedule_id == handle.job_schedule_id, job_claim.c.job_id == handle.job_id
                )
                .values(heartbeat_time=now)
            ).rowcount
            if kept == 1:
                conn.execute(
                    update(job_log)
                    .where(job_log.c.job_id == handle.job_id)
                    .values(heartbeat_time=now, last_update_time=now)
                )
        if kept != 1:
            handle.lost = self._lost_message(handle)
            raise ClaimLost(handle.lost)

    def _lost_message(self, handle: JobHandle) -> str:
        holder = self._claim_row(handle.job_schedule_id)
        row = self.get(handle.job_id)
        why = f": {row.error}" if row is not None and row.error else ""
        now_held = f"; now held by run {holder.run_id}" if holder is not None else ""
        return f"{handle.job_name} period {handle.partition_key or handle.range_start}: run {handle.run_id} lost its claim{why}{now_held}"

    @contextmanager
    def heartbeating(self, handle: JobHandle, interval_s: float | None = None) -> Iterator[Heartbeat]:
        """Send heartbeats from a background thread while the block runs.

        `interval_s` defaults to `heartbeat_interval_s()` (from the claim timeout).
        """
        if interval_s is None:
            interval_s = heartbeat_interval_s()
        beat = Heartbeat(self, handle, interval_s).start()
        try:
            yield beat
        finally:
            beat.stop()

    def finish(self, handle: JobHandle, status: str, error: str | None = None) -> None:
        """Write the final status and release the claim, in one transaction.

        Raises `ClaimLost` (recording nothing) when the claim was taken over, except for a FAILURE, whose row
        the taker already marked FAILURE: that is only logged.
        """
        if status not in FINAL_STATUSES:
            raise ValueError(f"finish status must be one of {sorted(FINAL_STATUSES)}, got {status!r}")
        self._ensure_asset(handle.job_name)
        now = self.now()
        with self.engine.begin() as conn:
            released = _release(conn, handle)
            if released == 1:
                conn.execute(
                    update(job_log)
                    .where(job_log.c.job_id == handle.job_id)
                    .values(status=status, job_end_time=now, last_update_time=now, error=error_text(error))
                )
                if status in DONE_STATUSES and handle.incremental_type == TIMEWINDOW and handle.range_end:
                    spans_mod.add_period(conn, handle.job_name, handle.range_start, handle.range_end, now)
        if released != 1:
            handle.lost = handle.lost or self._lost_message(handle)
            if status == FAILURE:
                log.warning("%s (its failure was not recorded: %s)", handle.lost, scrub_text(error))
                return
            raise ClaimLost(handle.lost)

    def withdraw(self, handle: JobHandle) -> bool:
        """Take back an attempt that published nothing and is retried at once by the same run (a range run's batch
        that fell back to one period at a time): its claim, its RUNNING row and its steps are deleted in one
        transaction, and the period's success span is restored when its previous attempt was done, so the job log
        reads as if the attempt had never been claimed. False (nothing changed) when the claim is no longer ours.
        """
        self._ensure_asset(handle.job_name)
        now = self.now()
        with self.engine.begin() as conn:
            released = _release(conn, handle)
            if released != 1:
                return False
            conn.execute(delete(step_log).where(step_log.c.job_id == handle.job_id))
            conn.execute(
                delete(job_log).where(job_log.c.job_id == handle.job_id, job_log.c.status == RUNNING)
            )
            previous = conn.execute(
                select(job_log.c.status)
                .where(job_log.c.job_schedule_id == handle.job_schedule_id)
                .order_by(job_log.c.attempt.desc())
                .limit(1)
            ).scalar()
            if previous in DONE_STATUSES and handle.incremental_type == TIMEWINDOW and handle.range_end:
                spans_mod.add_period(conn, handle.job_name, handle.range_start, handle.range_end, now)
        return True

    @contextmanager
    def run(
        self,
        job_name: str,
        window: ClaimWindow,
        run_id: str | None,
        partition_key: str | None = None,
        incremental_type: str | None = None,
        project_name: str | None = None,
        *,
        stale_after_s: float | None = None,
        heartbeat_interval_s: float | None = None,
    ) -> Iterator[JobHandle]:
        """Claim, send heartbeats while the block runs, then finish: SUCCESS, or FAILURE with the traceback when
        the block raises (re-raised). `ClaimRefused` comes out of the `with` before the block runs."""
        handle = self.claim(
            job_name,
            window,
            run_id,
            partition_key,
            incremental_type,
            project_name,
            stale_after_s=stale_after_s,
        )
        with self.heartbeating(handle, heartbeat_interval_s):
            try:
                yield handle
            except BaseException as exc:
                self.finish(handle, FAILURE, "".join(traceback.format_exception(exc)).strip())
                raise
        self.finish(handle, SUCCESS)
