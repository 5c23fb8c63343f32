"""Writing a table rollback to the job log: the periods whose published data a rollback undoes are no longer SUCCESS.

A table's `main` history (`IcebergTables.history`) names, for every publish, the attempt that made it (snapshot
summary `sharp.job_id`, `sharp.partition`, `sharp.token`). Rolling `main` back to an older snapshot undoes every
publish after it, so the job log's SUCCESS for those periods would be a lie: the planner would not re-run them and
downstream's upstream gate would read the old data as done. `rollback_table` therefore

1. works out the undone publishes from the history (refusing a target that is not an ancestor of `main`),
2. refuses, changing nothing, when one of their periods is held by a live run,
3. claims every such period (so no run publishes into it meanwhile), runs the caller's table rollback,
4. records on each claimed attempt a `rollback` step with the details and ends it FAILURE, with an error naming
   the snapshot restored and the publishes undone.

An ODS table (`cdc.ods.versions`: one tag per published day) is rolled back to a day instead (`rollback_days`):
every later day is no longer published (its tag is dropped) and gets the same claim, step and FAILURE.

No Spark and no Dagster here: the caller passes the history rows and the function that rolls the table back. The
periods' grain and start come from the asset's `PeriodSpec` (the caller's mapping `asset key -> PeriodSpec`, as
the `sharp-dagster log` commands learn them from the project's layout, `sharp_dagster.warehouse.layout`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from sharp_dagster.joblog.errors import ClaimRefused, JobLogError
from sharp_dagster.joblog.heartbeat import claim_timeout_s
from sharp_dagster.joblog.models import FAILURE, SUCCESS
from sharp_dagster.joblog.records import JobHandle, schedule_id_for
from sharp_dagster.joblog.store import JobLog
from sharp_dagster.periods import Period, PeriodSpec

ROLLBACK_STEP = "rollback"
ROLLBACK_PROJECT = "sharp_dagster"


class RollbackRefused(JobLogError):
    """The rollback was refused before anything changed (not an ancestor, a live claim, a bad period)."""


@dataclass(frozen=True)
class UndonePublish:
    """One snapshot of `main` that the rollback takes off it, and the attempt that published it (when known)."""

    snapshot_id: int
    operation: str | None
    token: str | None
    job_id: str | None
    partition_key: str | None
    job_name: str | None
    run_id: str | None
    added_records: int = 0
    deleted_records: int = 0
    day: str | None = None  # an ODS table's published day (its tag) that the rollback takes off `main`

    def describe(self) -> str:
        who = []
        if self.token:
            who.append(f"attempt {self.token}")
        if self.job_id:
            who.append(f"job id {self.job_id}")
        by = f", published by {' / '.join(who)}" if who else ""
        if self.day:
            return f"day {self.day} (tag {self.day} at snapshot {self.snapshot_id}{by})"
        return f"snapshot {self.snapshot_id}{by}"


@dataclass
class PeriodRollback:
    """A period whose data the rollback undid, and the FAILURE attempt recorded for it (None: not recorded)."""

    job_name: str
    partition_key: str
    undone: list[UndonePublish] = field(default_factory=list)
    job_id: str | None = None
    attempt: int | None = None
    error: str | None = None


@dataclass
class RollbackResult:
    table: str
    target_snapshot_id: int
    previous_snapshot_id: int | None
    undone: list[UndonePublish]
    periods: list[PeriodRollback]
    # Undone publishes that name no log-driven period (a write outside the job log, an unknown asset): why.
    unrecorded: list[tuple[UndonePublish, str]] = field(default_factory=list)
    target_day: str | None = None  # an ODS table rolled back to a day's tag (`rollback_days`)


def undone_publishes(history: Sequence[Mapping[str, Any]], target: int) -> list[UndonePublish]:
    """The snapshots of `main` after `target` up to its head, oldest first, from `IcebergTables.history()` rows.

    Walks the parent chain from the current snapshot; raises `RollbackRefused` when `target` is not on it (not an
    ancestor of `main`, or its history was expired).
    """
    by_id = {int(h["snapshot_id"]): h for h in history}
    current = [h for h in history if h.get("is_current")]
    if not current:
        raise RollbackRefused("the table has no current snapshot: nothing to roll back")
    target = int(target)
    if target not in by_id:
        raise RollbackRefused(f"snapshot {target} is not in main's history")
    chain: list[Mapping[str, Any]] = []
    node: Mapping[str, Any] | None = current[-1]
    seen: set[int] = set()
    while node is not None and int(node["snapshot_id"]) != target:
        sid = int(node["snapshot_id"])
        if sid in seen:  # a cycle cannot happen in Iceberg metadata; do not loop on a corrupt listing
            break
        seen.add(sid)
        chain.append(node)
        parent = node.get("parent_id")
        node = by_id.get(int(parent)) if parent is not None else None
    if node is None or int(node["snapshot_id"]) != target:
        raise RollbackRefused(f"snapshot {target} is not an ancestor of main's current snapshot")
    out = []
    for h in reversed(chain):
        props = dict(h.get("properties") or {})
        out.append(
            UndonePublish(
                snapshot_id=int(h["snapshot_id"]),
                operation=h.get("operation"),
                token=props.get("token") or h.get("token"),
                job_id=props.get("job_id"),
                partition_key=props.get("partition"),
                job_name=props.get("job_name"),
                run_id=props.get("run_id"),
                added_records=int(h.get("added_records") or 0),
                deleted_records=int(h.get("deleted_records") or 0),
            )
        )
    return out


def _group_periods(
    job_log: JobLog, undone: Sequence[UndonePublish], default_job_name: str, specs: Mapping[str, PeriodSpec]
) -> tuple[list[PeriodRollback], list[tuple[UndonePublish, str]]]:
    periods: dict[tuple[str, str], PeriodRollback] = {}
    unrecorded: list[tuple[UndonePublish, str]] = []
    for pub in undone:
        if not pub.job_id or not pub.partition_key:
            unrecorded.append((pub, "no sharp.job_id / sharp.partition: not published by a log-driven run"))
            continue
        # The attempt's own row is the authority on which asset it ran for; the snapshot's property, then the
        # table's asset key, when that row is gone.
        row = job_log.get(pub.job_id)
        job_name = (row.job_name if row is not None else None) or pub.job_name or default_job_name
        if job_name not in specs:
            unrecorded.append((pub, f"{job_name} is not a log-driven asset"))
            continue
        key = (job_name, pub.partition_key)
        periods.setdefault(key, PeriodRollback(job_name, pub.partition_key)).undone.append(pub)
    return list(periods.values()), unrecorded


def _error_for(table: str, restored: str, period: PeriodRollback, reason: str | None) -> str:
    undone = "; ".join(f"{p.describe()}, undone" for p in period.undone)
    why = f": {reason}" if reason else ""
    return f"rolled back: {table} restored to {restored} ({undone}){why}"


def rollback_table(
    job_log: JobLog,
    *,
    table: str,
    default_job_name: str,
    history: Sequence[Mapping[str, Any]],
    target: int,
    specs: Mapping[str, PeriodSpec],
    rollback: Callable[[int, int | None], int | None],
    reason: str | None = None,
    run_id: str | None = None,
) -> RollbackResult:
    """Roll `table` back to snapshot `target` and record a FAILURE attempt for every log-driven period it undoes.

    `history`: `IcebergTables.history()` of the table, read just before. `default_job_name`: the table's asset key
    (`ods/orders`), for publishes whose attempt row is gone. `specs`: asset key -> `PeriodSpec`. `rollback(target,
    expected_head)` rolls the table back, refusing (raising) when `main`'s head is no longer `expected_head`, and
    returns the snapshot id it replaced. It runs while the undone periods are claimed, so no run publishes into them.

    Raises `RollbackRefused`, having changed nothing, when `target` is not an ancestor of `main` or a period is held
    by a live run.
    """
    undone = undone_publishes(history, target)
    head = next((int(h["snapshot_id"]) for h in reversed(history) if h.get("is_current")), None)
    if not undone:
        raise RollbackRefused(f"{table} is already at snapshot {target}: nothing to roll back")
    periods, unrecorded = _group_periods(job_log, undone, default_job_name, specs)
    windows = _windows(periods, specs)
    _refuse_live_claims(job_log, periods, windows)
    handles = _claim(job_log, periods, windows, run_id, f"rollback of {table} to snapshot {target}")
    try:
        previous = rollback(int(target), head)
    except BaseException as exc:
        # The table may or may not have moved (a commit whose outcome is unknown): re-running the period is safe,
        # believing the old SUCCESS is not.
        for _, handle in handles:
            job_log.finish(handle, FAILURE, f"rollback of {table} to snapshot {target} failed: {exc}")
        raise
    for p, handle in handles:
        _record(job_log, handle, p, table, f"snapshot {int(target)}", previous, reason)
    return RollbackResult(
        table=table,
        target_snapshot_id=int(target),
        previous_snapshot_id=previous,
        undone=undone,
        periods=periods,
        unrecorded=unrecorded,
    )


def rollback_days(
    job_log: JobLog,
    *,
    table: str,
    job_name: str,
    target_day: str,
    target_snapshot_id: int,
    undone: Sequence[UndonePublish],
    specs: Mapping[str, PeriodSpec],
    rollback: Callable[[], int | None],
    reason: str | None = None,
    run_id: str | None = None,
) -> RollbackResult:
    """Roll an ODS table back to published day `target_day` (its tag, at `target_snapshot_id`) and record a FAILURE
    attempt of asset `job_name` for every later day it unpublishes, as `rollback_table` does for the periods of a
    `dt` table: refuse a day held by a live run, claim them all, run `rollback()` (which moves `main` to the tag,
    drops the later days' tags, refuses when `main` moved since `undone` was read, and returns the snapshot it
    replaced), then a `rollback` step and FAILURE naming the day restored on each.

    `undone`: the later days, oldest first, one `UndonePublish` each (`day` and `partition_key` the day); one that
    names no attempt gets the job log's latest SUCCESS attempt of its day."""
    if not undone:
        raise RollbackRefused(f"{table} is already at day {target_day}: no later day is published")
    if job_name not in specs:
        raise RollbackRefused(f"{job_name} is not a log-driven asset")
    periods = [PeriodRollback(job_name, str(u.partition_key), [u]) for u in undone]
    windows = _windows(periods, specs)
    _name_publishers(job_log, periods, windows)
    _refuse_live_claims(job_log, periods, windows)
    what = f"rollback of {table} to day {target_day}"
    handles = _claim(job_log, periods, windows, run_id, what)
    try:
        previous = rollback()
    except BaseException as exc:  # as in `rollback_table`: the days are re-run rather than trusted
        for _, handle in handles:
            job_log.finish(handle, FAILURE, f"{what} failed: {exc}")
        raise
    restored = f"day {target_day} (tag {target_day}, snapshot {target_snapshot_id})"
    for p, handle in handles:
        _record(job_log, handle, p, table, restored, previous, reason)
    return RollbackResult(
        table=table,
        target_snapshot_id=int(target_snapshot_id),
        previous_snapshot_id=previous,
        undone=[u for p in periods for u in p.undone],
        periods=periods,
        target_day=target_day,
    )


def _name_publishers(
    job_log: JobLog, periods: Sequence[PeriodRollback], windows: Mapping[tuple[str, str], Period]
) -> None:
    """An ODS day whose snapshot names no attempt (a migrated day, one merged before the merge commits carried
    `sharp.*` properties): the job log's latest SUCCESS attempt of the day is the one that published it."""
    starts = {windows[(p.job_name, p.partition_key)].range_start: p for p in periods}
    for job_name in {p.job_name for p in periods}:
        latest = job_log.latest_attempts(job_name, starts=sorted(starts))
        for start, attempt in latest.items():
            period = starts.get(start)
            if period is None or attempt.status != SUCCESS or period.job_name != job_name:
                continue
            period.undone = [
                u
                if u.job_id
                else replace(u, token=str(attempt.attempt), job_id=attempt.job_id, run_id=attempt.run_id)
                for u in period.undone
            ]


def _windows(
    periods: Sequence[PeriodRollback], specs: Mapping[str, PeriodSpec]
) -> dict[tuple[str, str], Period]:
    """Each undone period's window, from its asset's grain; a partition key that names no period is refused."""
    windows = {}
    for p in periods:
        try:
            windows[(p.job_name, p.partition_key)] = specs[p.job_name].period_for_key(p.partition_key)
        except ValueError as exc:
            raise RollbackRefused(f"{p.job_name}: snapshot property sharp.partition: {exc}") from None
    return windows


def _refuse_live_claims(
    job_log: JobLog, periods: Sequence[PeriodRollback], windows: Mapping[tuple[str, str], Period]
) -> None:
    """A live holder is refused before anything is written (a stale one is taken over by the claim after)."""
    stale_after = claim_timeout_s()
    now = job_log.now()
    for p in periods:
        holder = job_log.inspect_claim(
            schedule_id_for(p.job_name, windows[(p.job_name, p.partition_key)].range_start)
        )
        if holder is not None and (now - holder.heartbeat_time).total_seconds() <= stale_after:
            raise RollbackRefused(
                f"{p.job_name} [{p.partition_key}] is claimed by run {holder.run_id} (job {holder.job_id}), "
                f"last heartbeat {holder.heartbeat_time:%Y-%m-%d %H:%M:%S} UTC: wait for it or take it over"
            )


def _claim(
    job_log: JobLog,
    periods: Sequence[PeriodRollback],
    windows: Mapping[tuple[str, str], Period],
    run_id: str | None,
    what: str,
) -> list[tuple[PeriodRollback, JobHandle]]:
    """Claim every undone period, so no run publishes into it while the table rolls back; all or none."""
    handles: list[tuple[PeriodRollback, JobHandle]] = []
    try:
        for p in periods:
            handle = job_log.claim(
                p.job_name,
                windows[(p.job_name, p.partition_key)],
                run_id=run_id,
                partition_key=p.partition_key,
                project_name=ROLLBACK_PROJECT,
            )
            handles.append((p, handle))
    except ClaimRefused as exc:
        # A run claimed a period between the check and here: give back what was claimed, table untouched.
        for _, handle in handles:
            job_log.finish(handle, FAILURE, f"{what} aborted, table unchanged: {exc}")
        raise RollbackRefused(str(exc)) from None
    return handles


def _record(
    job_log: JobLog,
    handle: JobHandle,
    p: PeriodRollback,
    table: str,
    restored: str,
    previous: int | None,
    reason: str | None,
) -> None:
    """End a claimed period's attempt FAILURE, with a `rollback` step that names what was undone and why."""
    p.error = _error_for(table, restored, p, reason)
    with job_log.step(handle, ROLLBACK_STEP, source_type="iceberg", target_type="iceberg") as rec:
        rec.source_count = sum(u.added_records for u in p.undone)
        rec.target_count = 0
        rec.info(f"{table}: main rolled back from snapshot {previous} to {restored}")
        for u in p.undone:
            day = f"day {u.day} (no longer published), " if u.day else ""
            rec.info(
                f"undone: {day}snapshot {u.snapshot_id} ({u.operation or '?'}), attempt {u.token or '-'}, "
                f"job id {u.job_id or '-'}, run {u.run_id or '-'}, partition {u.partition_key or '-'}, "
                f"+{u.added_records} -{u.deleted_records} records"
            )
        if reason:
            rec.info(f"reason: {reason}")
    job_log.finish(handle, FAILURE, p.error)
    p.job_id, p.attempt = handle.job_id, handle.attempt
