"""What the parts of `JobLog` share: its database, its clock, the claim row of a period, the asset row.

`JobLog` (`store.py`) sets the attributes; `claims.py`, `fencing.py`, `takeover.py`, `steps.py` and `queries.py`
each add one concern on top of this base.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import insert, select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError

from sharp_dagster.joblog.models import job_asset, job_claim

if TYPE_CHECKING:
    from sharp_dagster.joblog.records import JobHandle, JobRun


class JobLogBase:
    """The state of a `JobLog` and the few operations every part of it uses."""

    engine: Engine
    _clock: Callable[[], datetime]
    _assets_known: set[str]
    # Called with the claim row a takeover read and judged stale, just before its compare-and-set (claim and
    # `takeover`). Tests put a heartbeat here to interleave "heartbeat arrives during a takeover" exactly.
    takeover_hook: Callable[[Any], None] | None

    if TYPE_CHECKING:  # defined by the parts (`queries.py`, `claims.py`)

        def get(self, job_id: str) -> JobRun | None: ...

        def _lost_message(self, handle: JobHandle) -> str: ...

    def now(self) -> datetime:
        return self._clock()

    def _claim_row(self, schedule_id: str) -> Any:
        with self.engine.connect() as conn:
            return conn.execute(select(job_claim).where(job_claim.c.job_schedule_id == schedule_id)).first()

    def _ensure_asset(self, job_name: str) -> None:
        if job_name in self._assets_known:
            return
        try:
            with self.engine.begin() as conn:
                conn.execute(insert(job_asset).values(job_name=job_name, version=0, updated_at=self.now()))
        except IntegrityError:
            pass
        self._assets_known.add(job_name)
