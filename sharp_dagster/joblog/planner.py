"""Log-driven planning of time-window assets: which periods are due, in which order, and whether a run may go.

A period is done when its *latest* attempt is SUCCESS (or SKIPPED). The pending queue of an asset is every fully
elapsed period from the asset's start whose latest attempt is FAILURE or that never ran, oldest first; periods
RUNNING right now are left out. Runs must go in order: `check_ordered` refuses a partition while an earlier one
is not done (Sharp ETL's "retry the failed period first"). `require_upstreams_done` is the upstream gate: a
partition may not run while any upstream period it reads (lookbacks included) has a latest attempt that is not
done (FAILURE, RUNNING, never run).

Cost does not grow with history: the store keeps, per asset, the spans of consecutive done periods, so only the
gaps between spans are enumerated and only the job_log rows inside gaps are read.

Times are naive UTC; partition keys match Dagster's daily ('2024-01-01') and hourly ('2024-01-01-05:00')
partitions of a UTC partitions definition.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any

from sharp_dagster.joblog.models import DONE_STATUSES, RUNNING, TIMEWINDOW
from sharp_dagster.joblog.store import JobLog, utcnow
from sharp_dagster.periods import (
    Period,
    PeriodSpec,
    format_window_bound,
    naive_utc,
    parse_window_bound,
)


class OutOfOrder(RuntimeError):
    """An earlier partition of the asset is not done, so this one may not run yet."""

    def __init__(self, message: str, *, blocking: Period):
        super().__init__(message)
        self.blocking = blocking


# Stretches longer than this are read as one range scan instead of a list of period starts.
_LIST_LIMIT = 2000


def _periods_in_gaps(
    job_log: JobLog, job_name: str, spec: PeriodSpec, lo: datetime, hi: datetime
) -> Iterator[Period]:
    """Periods in [lo, hi) not covered by a success span, each with its latest attempt, oldest first."""
    with job_log.reading() as conn:  # one connection: round trips dominate the cost on a server database
        gaps = job_log.uncovered(job_name, format_window_bound(lo), format_window_bound(hi), conn)
        if not gaps:
            return
        periods: list[Period] = []
        starts: list[str] = []
        ranges: list[tuple[str, str]] = []
        for a, b in _whole_periods(gaps, spec, lo, hi):
            window = list(spec.periods(a, b))
            periods.extend(window)
            if len(window) > _LIST_LIMIT:
                ranges.append((format_window_bound(a), format_window_bound(b)))
            else:
                starts.extend(p.range_start for p in window)
        latest = job_log.latest_attempts(job_name, starts, ranges, conn)
    for period in periods:
        yield period.with_attempt(latest.get(period.range_start))


def _whole_periods(
    gaps: list[tuple[str, str]], spec: PeriodSpec, lo: datetime, hi: datetime
) -> list[tuple[datetime, datetime]]:
    """Gaps widened to whole periods (a period is checked when any part of it lies in a gap), merged."""
    windows: list[tuple[datetime, datetime]] = []
    for a, b in gaps:
        ga = max(spec.floor(parse_window_bound(a)), lo)
        gb = min(spec.ceil(parse_window_bound(b)), hi)
        if windows and ga <= windows[-1][1]:
            windows[-1] = (windows[-1][0], max(windows[-1][1], gb))
        elif ga < gb:
            windows.append((ga, gb))
    return windows


def pending_queue(
    job_log: JobLog, job_name: str, spec: PeriodSpec, now: datetime | None = None
) -> list[Period]:
    """Failed and never-run periods from the asset's start, oldest first; only fully elapsed periods, RUNNING
    periods excluded. Each has `last_status` / `last_run_id` of its latest attempt (None: never run)."""
    hi = spec.elapsed_end(utcnow() if now is None else naive_utc(now))
    if hi <= spec.start:
        return []
    return [
        p
        for p in _periods_in_gaps(job_log, job_name, spec, spec.start, hi)
        if p.last_status not in DONE_STATUSES and p.last_status != RUNNING
    ]


def first_not_done(
    job_log: JobLog,
    job_name: str,
    spec: PeriodSpec,
    before: datetime,
    held: Mapping[str, str] | None = None,
) -> Period | None:
    """The earliest period before `before` whose latest attempt is not done (running, failed or never run).

    `held` maps period starts (`range_start`) to the run id that claimed them: such a period counts as done
    when its latest attempt is RUNNING in exactly that run (the earlier periods of a batch the caller holds)."""
    held = held or {}
    for period in _periods_in_gaps(job_log, job_name, spec, spec.start, before):
        if period.last_status in DONE_STATUSES:
            continue
        run_id = held.get(period.range_start)
        if run_id is not None and period.last_status == RUNNING and period.last_run_id == run_id:
            continue
        return period
    return None


def check_ordered(
    job_log: JobLog,
    job_name: str,
    spec: PeriodSpec,
    partition: str | Period,
    held: Mapping[str, str] | None = None,
) -> None:
    """Raise `OutOfOrder` when a partition earlier than `partition` (a key, or its period already built) is not
    done, naming the earliest one.

    A range run that claims its periods oldest first passes `held` ({range_start: run_id} of the periods it
    claimed already): those may be RUNNING in that very run. Any other run's claim, and any failed or never-run
    period, still blocks."""
    target = partition if isinstance(partition, Period) else spec.period_for_key(partition)
    partition_key = target.partition_key
    blocking = first_not_done(job_log, job_name, spec, target.start, held)
    if blocking is not None:
        raise OutOfOrder(
            f"{job_name} partition {partition_key} cannot run before the earlier partition "
            f"{blocking.describe()} is done",
            blocking=blocking,
        )


def _parse_bound(value: str | date | datetime, spec: PeriodSpec, *, upper: bool) -> datetime:
    """A --from / --to value: a date, a partition key or a datetime; an upper date includes its whole day."""
    if isinstance(value, datetime):
        ts = naive_utc(value)
        return spec.floor(ts) + spec.step if upper else spec.floor(ts)
    if isinstance(value, date):
        day = datetime(value.year, value.month, value.day)
        return day + timedelta(days=1) if upper else day
    text = value.strip()
    for fmt, whole_day in (("%Y-%m-%d", True), ("%Y-%m-%d-%H:%M", False), ("%Y-%m-%dT%H:%M", False)):
        try:
            ts = datetime.strptime(text, fmt)
        except ValueError:
            continue
        if not whole_day and spec.grain != "hourly":
            # Floored to its day, an hour would silently re-run (and re-publish) the whole day.
            raise ValueError(
                f"{text!r} is an hourly partition key, but the asset is {spec.grain}: give days (YYYY-MM-DD)"
            )
        if not whole_day and spec.floor(ts) != ts:
            raise ValueError(f"{text!r} is not the start of an hour (its partition key ends in :00)")
        try:
            if whole_day:
                return ts + timedelta(days=1) if upper else ts
            return ts + spec.step if upper else ts
        except OverflowError:
            raise ValueError(
                f"{text!r}: a range must end before 9999-12-31 (the calendar's last day)"
            ) from None
    raise ValueError(f"{text!r} is not a date (YYYY-MM-DD) or an hourly partition key (YYYY-MM-DD-HH:MM)")


def refresh_periods(
    spec: PeriodSpec,
    from_: str | date | datetime,
    to: str | date | datetime,
    now: datetime | None = None,
) -> list[Period]:
    """The periods of an explicit re-run from `from_` through `to` (both inclusive), oldest first.

    A date as `to` includes that whole day (all its hours for an hourly asset). Periods must lie inside the
    asset's range and be fully elapsed.
    """
    lo = _parse_bound(from_, spec, upper=False)
    hi = _parse_bound(to, spec, upper=True)
    if hi <= lo:
        raise ValueError(f"empty range: {from_} .. {to}")
    if lo < spec.start:
        raise ValueError(f"{from_} is before the asset's start {spec.start:%Y-%m-%d %H:%M}")
    elapsed = spec.elapsed_end(utcnow() if now is None else naive_utc(now))
    if hi > elapsed:
        raise ValueError(
            f"{to} is not fully elapsed yet (the last complete period ends {elapsed:%Y-%m-%d %H:%M} UTC)"
        )
    periods = list(spec.periods(lo, hi))
    if not periods:
        raise ValueError(f"no {spec.grain} period lies within {from_} .. {to}")
    return periods


@dataclass(frozen=True)
class UpstreamCheck:
    """Result of `check_upstream_done`: ok when every upstream period in the window is done."""

    upstream: str
    window_start: datetime
    window_end: datetime
    expected: int
    missing: tuple[Period, ...]

    @property
    def ok(self) -> bool:
        return not self.missing

    def describe(self) -> str:
        head = f"{self.upstream} [{self.window_start:%Y-%m-%d %H:%M}, {self.window_end:%Y-%m-%d %H:%M})"
        if self.ok:
            return f"{head}: all {self.expected} periods done"
        shown = ", ".join(p.describe() for p in self.missing[:10])
        more = f" and {len(self.missing) - 10} more" if len(self.missing) > 10 else ""
        return f"{head}: {len(self.missing)} of {self.expected} periods not done: {shown}{more}"


def check_upstream_done(
    job_log: JobLog,
    upstream_name: str,
    upstream_spec: PeriodSpec,
    window_start: datetime,
    window_end: datetime,
) -> UpstreamCheck:
    """Cross-frequency dependency: are all periods of the upstream inside [window_start, window_end) done?

    E.g. a daily asset checks the 24 hours of its day on an hourly upstream. Upstream periods that do not exist
    (before the upstream's start or after its end) count as missing: the dependency cannot be met.
    """
    lo, hi = naive_utc(window_start), naive_utc(window_end)
    if hi <= lo:
        raise ValueError(f"empty window [{lo}, {hi})")
    step = upstream_spec.step
    cursor = upstream_spec.floor(lo)
    outside: list[Period] = []
    while cursor < hi:
        inside_spec = cursor >= upstream_spec.start and (
            upstream_spec.end is None or cursor + step <= upstream_spec.end
        )
        if not inside_spec:
            outside.append(
                Period(cursor, cursor + step, upstream_spec.grain, last_status="outside the upstream's range")
            )
        cursor += step
    expected = len(outside) + sum(
        1 for _ in upstream_spec.periods(upstream_spec.floor(lo), upstream_spec.ceil(hi))
    )
    missing = [
        p
        for p in _periods_in_gaps(
            job_log, upstream_name, upstream_spec, upstream_spec.floor(lo), upstream_spec.ceil(hi)
        )
        if p.last_status not in DONE_STATUSES
    ]
    return UpstreamCheck(
        upstream=upstream_name,
        window_start=lo,
        window_end=hi,
        expected=expected,
        missing=tuple(sorted(outside + missing)),
    )


# ---------------------------------------------------------------------- the upstream gate of one partition


@dataclass(frozen=True)
class UpstreamRead:
    """A log-driven upstream of an asset: its periods, and how many earlier periods (`@lookback`) a partition
    of the downstream also reads."""

    spec: PeriodSpec
    lookback: int = 0

    def __post_init__(self) -> None:
        if self.lookback < 0:
            raise ValueError(f"lookback must be 0 or more periods, got {self.lookback}")

    def window(self, target: Period) -> tuple[datetime, datetime]:
        """The upstream stretch one downstream period reads: its own window widened to whole upstream periods,
        plus `lookback` upstream periods before it."""
        lo = self.spec.floor(target.start) - self.spec.step * self.lookback
        return lo, self.spec.ceil(target.end)


@dataclass(frozen=True)
class LogDrivenAsset:
    """What the job log needs to know about an asset: its name (`layer/table`), periods and upstreams."""

    job_name: str
    spec: PeriodSpec
    # Every log-driven upstream the asset reads (any grain), with its lookback: the upstream gate checks them.
    upstream: dict[str, UpstreamRead] = field(default_factory=dict)
    incremental_type: str = TIMEWINDOW
    # Why a period cannot start yet (e.g. its binlog has not fully landed), or None when it can.
    ready: Callable[[Any], str | None] | None = field(default=None, compare=False)


class UpstreamNotDone(RuntimeError):
    """A partition reads upstream periods whose latest attempt is not SUCCESS: it may not run."""

    def __init__(self, message: str, *, blocking: tuple[tuple[str, Period], ...]):
        super().__init__(message)
        self.blocking = blocking


def _status_of(period: Period) -> str:
    """'FAILURE (run 1a2b3c4d)', 'RUNNING (run ...)', 'never run', 'outside the upstream's range'."""
    if period.last_status is None:
        return "never run"
    if period.last_run_id is None:
        return period.last_status
    return f"{period.last_status} (run {period.last_run_id[:8]})"


def upstream_checks(
    job_log: JobLog, target: Period, upstreams: Mapping[str, UpstreamRead]
) -> list[UpstreamCheck]:
    """One `UpstreamCheck` per upstream (by name, sorted) over the upstream periods `target` reads."""
    checks = []
    for name in sorted(upstreams):
        lo, hi = upstreams[name].window(target)
        checks.append(check_upstream_done(job_log, name, upstreams[name].spec, lo, hi))
    return checks


def require_upstreams_done(
    job_log: JobLog,
    job_name: str,
    target: Period,
    upstreams: Mapping[str, UpstreamRead],
) -> list[UpstreamCheck]:
    """The upstream gate: raise `UpstreamNotDone` unless the latest attempt of every upstream period `target`
    reads (same grain or not, lookbacks included) is done; returns the checks when it may run.

    The one place this decision is made: every launch path (UI, backfill, sensor, `log rerun`) reaches it through
    the run lifecycle, after the claim, so a refusal is recorded as the downstream's FAILURE. The message names
    each blocking upstream period, e.g. `ods/orders [2024-01-01]: FAILURE (run 1a2b3c4d)`.
    """
    checks = upstream_checks(job_log, target, upstreams)
    blocking = tuple((c.upstream, p) for c in checks for p in c.missing)
    if not blocking:
        return checks
    shown = "; ".join(f"{name} [{p.partition_key}]: {_status_of(p)}" for name, p in blocking[:10])
    more = f"; and {len(blocking) - 10} more" if len(blocking) > 10 else ""
    raise UpstreamNotDone(
        f"{job_name} [{target.partition_key}] refused: upstream not SUCCESS in the job log: {shown}{more}",
        blocking=blocking,
    )
