"""The hourly done markers of the landing: `<warehouse>/original_binlog.db/_done/<db>/dt=YYYY-MM-DD/hour=HH`, one
small JSON file per hour, written when the hour and the lateness window after it are covered by the low watermark
(see `landing.py` for the watermark)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from pyspark.sql import SparkSession

from sharp_dagster.cdc.landing import RAW_DATABASE
from sharp_dagster.cdc.landing_parser import utc_datetime
from sharp_dagster.spark.filesystem import file_system

HOUR_MS = 3_600_000


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
        self, low_watermark_ms: int | None, lateness_minutes: int, since_ms: int
    ) -> list[tuple[str, str]]:
        """Write the marker of every hour from the hour of `since_ms` whose end + lateness the watermark passed.

        Returns the (dt, hour) markers written now; existing markers are left as they are.
        """
        if low_watermark_ms is None:
            return []
        written: list[tuple[str, str]] = []
        hour_start = since_ms - since_ms % HOUR_MS
        lateness_ms = lateness_minutes * 60_000
        payload = {"low_watermark_ms": low_watermark_ms, "lateness_minutes": lateness_minutes}
        while hour_start + HOUR_MS + lateness_ms <= low_watermark_ms:
            when = utc_datetime(hour_start)
            day, hour = when.strftime("%Y-%m-%d"), when.strftime("%H")
            path = self.marker_path(day, hour)
            if not self._fs.exists(path):
                body = {**payload, "written_at_ms": int(time.time() * 1000), "hour_start_ms": hour_start}
                self._fs.write_text(path, json.dumps(body, sort_keys=True))
                written.append((day, hour))
            hour_start += HOUR_MS
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
    since_ms: int,
    spark: SparkSession | None = None,
) -> list[tuple[str, str]]:
    """See `DoneMarkers.write`."""
    return DoneMarkers(warehouse_dir, database, spark).write(low_watermark_ms, lateness_minutes, since_ms)


def hours_done(
    warehouse_dir: str | Path, database: str, day: str, spark: SparkSession | None = None
) -> list[str]:
    return DoneMarkers(warehouse_dir, database, spark).hours_done(day)


def day_complete(
    warehouse_dir: str | Path, database: str, day: str, spark: SparkSession | None = None
) -> bool:
    """True when all 24 hourly markers of `day` exist: the daily merge of that day may run."""
    return DoneMarkers(warehouse_dir, database, spark).day_complete(day)
