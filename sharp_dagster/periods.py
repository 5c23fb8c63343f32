"""Periods, defined once: the grains, a partition key <-> its time window, and the job log's window bounds.

Every layer that turns a partition key into a time window (the planner, SQL variables, data-quality rules, the
Dagster partitions, the sensors) asks this module. A run parses its partition key once (`period_of_key`, through
`PeriodSpec.period_for_key`) and hands the `Period` on: its upstream periods (`periods_in_window`), its partition
columns (`period_values`), its window as SQL text (`window_text`) come from the object, never from the key again. Times are naive UTC; partition keys match Dagster's daily
(`2024-01-01`) and hourly (`2024-01-01-05:00`) partitions of a UTC partitions definition; the job log stores a
window bound as fixed-width `yyyyMMddHHmmss`.

>>> p = period_of_key("2024-01-02-05:00")
>>> p.grain, p.start, p.end
('hourly', datetime.datetime(2024, 1, 2, 5, 0), datetime.datetime(2024, 1, 2, 6, 0))
>>> p.range_start, partition_values(p.partition_key, p.grain)
('20240102050000', {'dt': '2024-01-02', 'hour': '05'})
>>> keys_in_window(period_of_key("2024-01-02", "daily"), "hourly")[:2]
['2024-01-02-00:00', '2024-01-02-01:00']
>>> day_before("2024-03-01")
'2024-02-29'
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

TIMEWINDOW = "timewindow"
GRAINS: dict[str, timedelta] = {"daily": timedelta(days=1), "hourly": timedelta(hours=1)}
KEY_FORMATS = {"daily": "%Y-%m-%d", "hourly": "%Y-%m-%d-%H:%M"}


def format_window_bound(ts: datetime) -> str:
    """A time-window bound as stored in job_log: fixed-width 'yyyyMMddHHmmss' (UTC)."""
    ts = naive_utc(ts)
    # Hand-formatted: the planner formats thousands of bounds per call and strftime is several times slower.
    return f"{ts.year:04d}{ts.month:02d}{ts.day:02d}{ts.hour:02d}{ts.minute:02d}{ts.second:02d}"


def parse_window_bound(text: str) -> datetime:
    try:
        if len(text) != 14 or not text.isdigit():
            raise ValueError
        return datetime(
            int(text[0:4]),
            int(text[4:6]),
            int(text[6:8]),
            int(text[8:10]),
            int(text[10:12]),
            int(text[12:14]),
        )
    except ValueError:
        raise ValueError(f"not a time-window bound (yyyyMMddHHmmss): {text!r}") from None


def naive_utc(ts: datetime) -> datetime:
    if ts.tzinfo is not None:
        ts = ts.astimezone(UTC).replace(tzinfo=None)
    return ts


@dataclass(frozen=True, order=True)
class Period:
    """One time window [start, end) of an asset; `last_*` describe its latest attempt (None: never run)."""

    start: datetime
    end: datetime
    grain: str = field(compare=False)
    last_status: str | None = field(default=None, compare=False)
    last_run_id: str | None = field(default=None, compare=False)
    last_job_id: str | None = field(default=None, compare=False)

    incremental_type = TIMEWINDOW  # the job log's range mode of a period

    @property
    def partition_key(self) -> str:
        return self.start.strftime(KEY_FORMATS[self.grain])

    @property
    def range_start(self) -> str:
        return format_window_bound(self.start)

    @property
    def range_end(self) -> str:
        return format_window_bound(self.end)

    @property
    def period_minutes(self) -> int:
        return int((self.end - self.start).total_seconds() // 60)

    def describe(self) -> str:
        """'2024-01-03 (FAILURE, run abc)' or '2024-01-03 (never run)'."""
        if self.last_status is None:
            return f"{self.partition_key} (never run)"
        if self.last_run_id is None:
            return f"{self.partition_key} ({self.last_status})"
        return f"{self.partition_key} ({self.last_status}, run {self.last_run_id})"

    def with_attempt(self, attempt: Any) -> Period:
        """This period with the status, run and job of `attempt` (anything with those attributes), if any."""
        if attempt is None:
            return self
        return Period(
            self.start,
            self.end,
            self.grain,
            attempt.status,
            attempt.run_id,
            attempt.job_id,
        )

    def as_dict(self) -> dict[str, str | None]:
        return {
            "partition_key": self.partition_key,
            "start": self.start.isoformat(),
            "end": self.end.isoformat(),
            "status": self.last_status,
            "run_id": self.last_run_id,
            "job_id": self.last_job_id,
        }


@dataclass(frozen=True)
class PeriodSpec:
    """The periods of an asset: `grain` 'daily' | 'hourly' from `start`, up to `end` (exclusive) if given."""

    grain: str
    start: datetime
    end: datetime | None = None

    def __post_init__(self) -> None:
        if self.grain not in GRAINS:
            raise ValueError(f"PeriodSpec grain must be one of {sorted(GRAINS)}, got {self.grain!r}")
        start = _as_datetime(self.start)
        object.__setattr__(self, "start", start)
        if start != self.floor(start):
            raise ValueError(f"PeriodSpec start {start} is not on a {self.grain} boundary")
        if self.end is not None:
            end = _as_datetime(self.end)
            object.__setattr__(self, "end", end)
            if end <= start:
                raise ValueError(f"PeriodSpec end {end} is not after its start {start}")

    @property
    def step(self) -> timedelta:
        return GRAINS[self.grain]

    @property
    def period_minutes(self) -> int:
        return int(self.step.total_seconds() // 60)

    def floor(self, ts: datetime) -> datetime:
        return period_at(ts, self.grain).start

    def ceil(self, ts: datetime) -> datetime:
        floor = self.floor(ts)
        return floor if floor == naive_utc(ts) else floor + self.step

    def period_at(self, ts: datetime) -> Period:
        return period_at(ts, self.grain)

    def period_for_key(self, partition_key: str) -> Period:
        """The period of a Dagster partition key ('2024-01-01' / '2024-01-01-05:00') inside the spec's range."""
        period = period_of_key(partition_key, self.grain)
        self._check_inside(period.start)
        return period

    def _check_inside(self, start: datetime) -> None:
        if start < self.start:
            raise ValueError(
                f"partition {start:%Y-%m-%d %H:%M} is before the asset's start {self.start:%Y-%m-%d %H:%M}"
            )
        if self.end is not None and start + self.step > self.end:
            raise ValueError(
                f"partition {start:%Y-%m-%d %H:%M} is after the asset's end {self.end:%Y-%m-%d %H:%M}"
            )

    def elapsed_end(self, now: datetime) -> datetime:
        """End of the last fully elapsed period (bounded by the spec's end)."""
        hi = self.floor(now)
        if self.end is not None and self.end < hi:
            hi = self.floor(self.end)
        return hi

    def periods(self, lo: datetime, hi: datetime) -> Iterator[Period]:
        """Periods of the spec lying inside [lo, hi), clipped to the spec's own range."""
        start = max(self.ceil(lo), self.start)
        end = hi if self.end is None else min(hi, self.end)
        step = self.step
        while start + step <= end:
            yield Period(start, start + step, self.grain)
            start += step


def _as_datetime(value: datetime | date) -> datetime:
    if isinstance(value, datetime):
        return naive_utc(value)
    return datetime(value.year, value.month, value.day)


def grain_of_key(key: str) -> str:
    """'daily' for `2024-01-01`, 'hourly' for `2024-01-01-05:00`; a ValueError names any other key.

    >>> grain_of_key("2024-01-01"), grain_of_key("2024-01-01-05:00")
    ('daily', 'hourly')
    """
    for grain, fmt in KEY_FORMATS.items():
        try:
            datetime.strptime(key, fmt)
        except ValueError:
            continue
        return grain
    raise ValueError(f"{key!r} is not a partition key (expected e.g. '2024-01-01' or '2024-01-01-05:00')")


def period_of_key(key: str, grain: str | None = None) -> Period:
    """The period of a partition key, of `grain` (inferred from the key when None); a ValueError names a key that
    is not of that grain."""
    grain = grain or grain_of_key(key)
    if grain not in GRAINS:
        raise ValueError(f"unknown grain {grain!r} (expected one of {sorted(GRAINS)})")
    try:
        start = datetime.strptime(key, KEY_FORMATS[grain])
    except ValueError:
        example = "2024-01-01" if grain == "daily" else "2024-01-01-05:00"
        raise ValueError(f"{key!r} is not a {grain} partition key (expected e.g. {example!r})") from None
    return Period(start, start + GRAINS[grain], grain)


def period_at(ts: datetime, grain: str) -> Period:
    """The period of `grain` holding `ts` (aware times are converted to UTC).

    >>> period_at(datetime(2024, 1, 2, 5, 59), "hourly").partition_key
    '2024-01-02-05:00'
    """
    ts = naive_utc(ts)
    start = ts.replace(minute=0, second=0, microsecond=0)
    if grain == "daily":
        start = start.replace(hour=0)
    return Period(start, start + GRAINS[grain], grain)


def periods_in_window(period: Period, grain: str, lookback: int = 0) -> list[Period]:
    """The periods of `grain` that cover `period`, preceded by `lookback` earlier ones (what a partition of
    `period` reads from an upstream of `grain`).

    >>> [p.partition_key for p in periods_in_window(period_at(datetime(2024, 1, 2), "daily"), "daily", 1)]
    ['2024-01-01', '2024-01-02']
    """
    step = GRAINS[grain]
    cursor, found = period.start - step * lookback, []
    while cursor < period.end:
        found.append(Period(cursor, cursor + step, grain))
        cursor += step
    return found


def keys_in_window(period: Period, grain: str, lookback: int = 0) -> list[str]:
    """The partition keys of `periods_in_window`."""
    return [p.partition_key for p in periods_in_window(period, grain, lookback)]


def day_before(day: str) -> str:
    """The calendar day before `day` ('YYYY-MM-DD'): a SQL file's `${prev_dt}`, the ODS day a merge of `day`
    starts from, the day of a source's bootstrap snapshot (the day before its start)."""
    return (date.fromisoformat(day) - timedelta(days=1)).isoformat()


# The partition columns a table of each grain is partitioned by, and their values for one key.
PARTITION_COLUMNS = {"daily": ("dt",), "hourly": ("dt", "hour")}


def partition_values(key: str, grain: str) -> dict[str, str]:
    """`2024-01-02` -> {dt}; `2024-01-02-05:00` -> {dt, hour}."""
    return period_values(period_of_key(key, grain))


def period_values(period: Period) -> dict[str, str]:
    """The partition columns' values of a period: {dt} for a day, {dt, hour} for an hour."""
    values = {"dt": period.start.strftime("%Y-%m-%d"), "hour": period.start.strftime("%H")}
    return {c: values[c] for c in PARTITION_COLUMNS[period.grain]}


def window_text(period: Period) -> tuple[str, str]:
    """The window as SQL timestamps (`DATA_RANGE_START` / `DATA_RANGE_END`): 'yyyy-MM-dd HH:mm:ss'."""
    fmt = "%Y-%m-%d %H:%M:%S"
    return period.start.strftime(fmt), period.end.strftime(fmt)
