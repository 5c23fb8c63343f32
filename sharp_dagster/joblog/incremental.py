"""The three incremental modes of a log-driven run: where the next run starts and how its real end is recorded.

* time window (default): the periods of a `PeriodSpec`, planned by `plan_time_window` (the pending queue, with
  Sharp ETL's `--once` / `--latest-only`).
* auto-increment key: one run; start = the last success's end (else `default_start`, else 0), exclusive; the run
  reads keys `> start`, records the largest key it actually read, and that becomes the end (inclusive), written
  back with `JobLog.set_range_end` before `finish`. Stored zero-padded to 20 digits so text order is key order.
* Kafka offsets: one run; start = the offsets `{topic: {partition: offset}}` of the last success (else
  `earliest`; "last" = the largest offsets among the newest successes, not trusting clocks alone), inclusive;
  end = max offset actually read + 1 per partition (partitions with nothing read keep their start), stored as
  compact sorted JSON.

The returned ranges satisfy the `ClaimWindow` protocol of `JobLog.claim` (range_start, range_end,
period_minutes, incremental_type).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from sharp_dagster.joblog.models import AUTO_INC_ID, KAFKA_OFFSET
from sharp_dagster.joblog.planner import pending_queue
from sharp_dagster.joblog.store import JobLog
from sharp_dagster.periods import Period, PeriodSpec

ID_WIDTH = 20
EARLIEST = "earliest"
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")

Offsets = dict[str, dict[int, int]]


# ---------------------------------------------------------------- time window


def plan_time_window(
    job_log: JobLog,
    job_name: str,
    spec: PeriodSpec,
    now: datetime | None = None,
    *,
    once: bool = False,
    latest_only: bool = False,
) -> list[Period]:
    """The periods to run now: the pending queue, or only its oldest (`once`) or newest (`latest_only`)."""
    if once and latest_only:
        raise ValueError("once and latest_only exclude each other")
    queue = pending_queue(job_log, job_name, spec, now)
    if once:
        return queue[:1]
    if latest_only:
        return queue[-1:]
    return queue


# ---------------------------------------------------------------- auto-increment key


def format_id(value: int) -> str:
    """An auto-increment key as stored in job_log: zero-padded to 20 digits."""
    if value < 0:
        raise ValueError(f"auto-increment keys are not negative, got {value}")
    text = str(int(value))
    if len(text) > ID_WIDTH:
        raise ValueError(f"auto-increment key {value} has more than {ID_WIDTH} digits")
    return text.zfill(ID_WIDTH)


def parse_id(text: str) -> int:
    if not text.isdigit():
        raise ValueError(f"not an auto-increment range bound: {text!r}")
    return int(text)


@dataclass
class AutoIncRange:
    """Keys (start, end]: `start` from the log, `end` recorded once the read is done."""

    start: int
    period_minutes: int = 0
    end: int | None = None

    incremental_type = AUTO_INC_ID

    @property
    def range_start(self) -> str:
        return format_id(self.start)

    @property
    def range_end(self) -> str | None:
        return None if self.end is None else format_id(self.end)

    def where(self, column: str) -> str:
        """The SQL filter of the read, e.g. `id > 1234`."""
        if not _IDENT.match(column):
            raise ValueError(f"not a column name: {column!r}")
        return f"{column} > {int(self.start)}"

    def record_read(self, max_key: int | None) -> str:
        """Record the largest key actually read (None: nothing read, the end stays at the start); returns the
        end to write back with `JobLog.set_range_end`."""
        if max_key is None:
            self.end = self.start
        else:
            if max_key <= self.start:
                raise ValueError(f"read key {max_key} is not above the range start {self.start}")
            self.end = int(max_key)
        return format_id(self.end)


def plan_auto_inc(
    job_log: JobLog, job_name: str, default_start: int = 0, period_minutes: int = 0
) -> AutoIncRange:
    """The next auto-increment run: start = max(last success's end, `default_start`)."""
    last = job_log.last_success(job_name, incremental_type=AUTO_INC_ID)
    start = int(default_start)
    if last is not None and last.range_end:
        start = max(start, parse_id(last.range_end))
    return AutoIncRange(start=start, period_minutes=period_minutes)


# ---------------------------------------------------------------- Kafka offsets


def format_offsets(offsets: Mapping[str, Mapping[int | str, int]]) -> str:
    """Offsets as stored in job_log: compact JSON, topics sorted, partitions in numeric order."""
    ordered = {
        topic: {str(p): int(o) for p, o in sorted(parts.items(), key=lambda kv: int(kv[0]))}
        for topic, parts in sorted(offsets.items())
    }
    return json.dumps(ordered, separators=(",", ":"))


def parse_offsets(text: str) -> Offsets | None:
    """JSON offsets back to `{topic: {partition: offset}}`; `earliest` gives None."""
    if text == EARLIEST:
        return None
    try:
        raw = json.loads(text)
        return {str(t): {int(p): int(o) for p, o in parts.items()} for t, parts in raw.items()}
    except (ValueError, AttributeError, TypeError):
        raise ValueError(f"not a Kafka offsets range bound: {text[:200]!r}") from None


@dataclass
class KafkaRange:
    """Offsets [start, end) per topic partition; `start` None means `earliest` for every partition."""

    start: Offsets | None
    period_minutes: int = 0
    read: Offsets = field(default_factory=dict)

    incremental_type = KAFKA_OFFSET

    @property
    def range_start(self) -> str:
        return EARLIEST if self.start is None else format_offsets(self.start)

    @property
    def range_end(self) -> str | None:
        """None until something was recorded (then the end offsets)."""
        if not self.read:
            return None
        return format_offsets(self.end_offsets())

    def start_offset(self, topic: str, partition: int) -> int | None:
        """Where to start reading a partition; None: from the earliest offset."""
        if self.start is None:
            return None
        return self.start.get(topic, {}).get(int(partition))

    def record(self, topic: str, partition: int, offset: int) -> None:
        """One message was read at `offset`."""
        parts = self.read.setdefault(topic, {})
        partition = int(partition)
        if offset > parts.get(partition, -1):
            parts[partition] = int(offset)

    def record_batch(self, max_offsets: Mapping[str, Mapping[int, int]]) -> None:
        """The largest offset read per partition of a batch."""
        for topic, parts in max_offsets.items():
            for partition, offset in parts.items():
                self.record(topic, partition, offset)

    def end_offsets(self) -> Offsets:
        """Start offsets advanced to (max read + 1) for every partition that was read."""
        end: Offsets = {t: dict(parts) for t, parts in (self.start or {}).items()}
        for topic, parts in self.read.items():
            for partition, offset in parts.items():
                current = end.setdefault(topic, {}).get(partition)
                end[topic][partition] = max(offset + 1, current if current is not None else 0)
        return end

    def finish_end(self) -> str:
        """The end to write back with `JobLog.set_range_end` (the start again when nothing was read)."""
        return self.range_end or self.range_start


def _last_kafka_end(job_log: JobLog, job_name: str) -> Offsets | None:
    """End offsets of the newest success. Offsets only grow along the chain of successes (each starts where the
    previous ended), so among the last few by end time the one with the largest offset total is the newest:
    this survives equal timestamps and hosts whose clocks disagree."""
    best: tuple[int, Offsets] | None = None
    for run in job_log.recent_successes(job_name, KAFKA_OFFSET, limit=20):
        offsets = parse_offsets(run.range_end or EARLIEST)
        if offsets is None:
            continue
        total = sum(o for parts in offsets.values() for o in parts.values())
        if best is None or total > best[0]:
            best = (total, offsets)
    return None if best is None else best[1]


def plan_kafka(
    job_log: JobLog,
    job_name: str,
    default_start: Mapping[str, Mapping[int, int]] | str = EARLIEST,
    period_minutes: int = 0,
) -> KafkaRange:
    """The next Kafka run: start = end offsets of the last success, else `default_start` (offsets or
    'earliest'). Partitions the last success never saw start from `default_start` when it names them."""
    default = (
        None
        if default_start == EARLIEST
        else parse_offsets(default_start)
        if isinstance(default_start, str)
        else {t: {int(p): int(o) for p, o in parts.items()} for t, parts in default_start.items()}
    )
    start = _last_kafka_end(job_log, job_name)
    if start is None:
        return KafkaRange(start=default, period_minutes=period_minutes)
    for topic, parts in (default or {}).items():
        for partition, offset in parts.items():
            start.setdefault(topic, {}).setdefault(partition, offset)
    return KafkaRange(start=start, period_minutes=period_minutes)
