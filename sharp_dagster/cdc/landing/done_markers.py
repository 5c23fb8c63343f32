"""The hourly done markers of the landing: `<warehouse>/original_binlog.db/_done/<db>/dt=YYYY-MM-DD/hour=HH`, one
small JSON file per hour, written when the hour and the lateness window after it are covered by the low watermark
(see `landing.py` for the watermark; hours are those of the changes' commit times).

Which hours get a marker is decided in one place, `hours_to_mark`, which every landing path calls (the Dagster
asset and `sharp-dagster cdc land`): every hour the watermark has passed, whether it had changes or not, from the
start of the UTC day of the first commit or heartbeat the landing ever saw (a capture's first day has its quiet
first hours too), or, once a watermark was reached before, from the start of the day of the first hour that
watermark had not passed (hours before it have their markers already; this bounds the hours checked per run).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from pyspark.sql import SparkSession

from sharp_dagster.cdc.landing.parser import utc_datetime
from sharp_dagster.cdc.landing.raw_tables import RAW_DATABASE
from sharp_dagster.spark.filesystem import file_system

HOUR_MS = 3_600_000


DAY_MS = 24 * HOUR_MS


def hours_to_mark(
    low_watermark_ms: int | None,
    lateness_minutes: int,
    first_seen_ms: int | None,
    prior_low_watermark_ms: int | None = None,
) -> list[int]:
    """The start (ms) of every hour whose end + lateness the low watermark has passed, from where marking starts.

    >>> day = 1_709_251_200_000  # 2024-03-01 00:00 UTC
    >>> [(h - day) // HOUR_MS for h in hours_to_mark(day + 3 * HOUR_MS + 15 * 60_000, 15, day + 150 * 60_000)]
    [0, 1, 2]

    The first change at 02:30 (quiet hours 00 and 01 included), the watermark at 03:15 with 15 minutes of
    lateness: hours 00, 01 and 02 are done.
    """
    if low_watermark_ms is None or (first_seen_ms is None and prior_low_watermark_ms is None):
        return []
    lateness_ms = lateness_minutes * 60_000
    starts = []
    if first_seen_ms is not None:
        starts.append(first_seen_ms - first_seen_ms % DAY_MS)
    if prior_low_watermark_ms is not None:
        # The first hour the previous watermark had not passed, and the rest of its day.
        open_hour = prior_low_watermark_ms - lateness_ms - HOUR_MS
        starts.append(open_hour - open_hour % DAY_MS)
    hour_start = max(starts)
    hours = []
    while hour_start + HOUR_MS + lateness_ms <= low_watermark_ms:
        hours.append(hour_start)
        hour_start += HOUR_MS
    return hours


class DoneMarkers:
    """The hourly done markers of one source database under a warehouse folder (local path or Hadoop URI)."""

    def __init__(self, warehouse_dir: str | Path, database: str, spark: SparkSession | None = None):
        self.warehouse_dir = str(warehouse_dir).rstrip("/")
        self.database = database
        self.root = f"{self.warehouse_dir}/{RAW_DATABASE}.db/_done/{database}"
        self._fs = file_system(self.warehouse_dir, spark)

    def marker_path(self, day: str, hour: str) -> str:
        return f"{self.root}/dt={day}/hour={hour}"

    def write(
        self,
        low_watermark_ms: int | None,
        lateness_minutes: int,
        first_seen_ms: int | None,
        prior_low_watermark_ms: int | None = None,
    ) -> list[tuple[str, str]]:
        """Write the marker of every hour `hours_to_mark` gives.

        Returns the (dt, hour) markers written now; existing markers are left as they are.
        """
        written: list[tuple[str, str]] = []
        payload = {"low_watermark_ms": low_watermark_ms, "lateness_minutes": lateness_minutes}
        hours = hours_to_mark(low_watermark_ms, lateness_minutes, first_seen_ms, prior_low_watermark_ms)
        for hour_start in hours:
            when = utc_datetime(hour_start)
            day, hour = when.strftime("%Y-%m-%d"), when.strftime("%H")
            path = self.marker_path(day, hour)
            if not self._fs.exists(path):
                body = {**payload, "written_at_ms": int(time.time() * 1000), "hour_start_ms": hour_start}
                self._fs.write_text(path, json.dumps(body, sort_keys=True))
                written.append((day, hour))
        return written

    def hours_done(self, day: str) -> list[str]:
        """The hours ('00'..'23') of `day` (YYYY-MM-DD) that have a marker, sorted."""
        names = self._fs.list_files(f"{self.root}/dt={day}")
        return sorted(n.split("=", 1)[1] for n in names if n.startswith("hour="))

    def day_complete(self, day: str) -> bool:
        return len(self.hours_done(day)) == 24


def write_done_markers(
    warehouse_dir: str | Path,
    database: str,
    low_watermark_ms: int | None,
    lateness_minutes: int,
    first_seen_ms: int | None,
    spark: SparkSession | None = None,
    *,
    prior_low_watermark_ms: int | None = None,
) -> list[tuple[str, str]]:
    """See `DoneMarkers.write` and `hours_to_mark`."""
    return DoneMarkers(warehouse_dir, database, spark).write(
        low_watermark_ms, lateness_minutes, first_seen_ms, prior_low_watermark_ms
    )


def hours_done(
    warehouse_dir: str | Path, database: str, day: str, spark: SparkSession | None = None
) -> list[str]:
    return DoneMarkers(warehouse_dir, database, spark).hours_done(day)


def day_complete(
    warehouse_dir: str | Path, database: str, day: str, spark: SparkSession | None = None
) -> bool:
    """True when all 24 hourly markers of `day` exist: the daily merge of that day may run."""
    return DoneMarkers(warehouse_dir, database, spark).day_complete(day)
