"""Time-window partitions shared by every asset of a grain, and the mapping from a key to partition columns."""

from __future__ import annotations

from functools import cache

from dagster import DailyPartitionsDefinition, HourlyPartitionsDefinition, TimeWindowPartitionsDefinition

PARTITION_COLUMNS = {"daily": ("dt",), "hourly": ("dt", "hour")}


@cache
def partitions_for(grain: str, start: str) -> TimeWindowPartitionsDefinition:
    """One definition object per (grain, start), so assets of one grain share it (and can share a job)."""
    if grain == "daily":
        return DailyPartitionsDefinition(start_date=start)
    if grain == "hourly":
        return HourlyPartitionsDefinition(start_date=f"{start}-00:00")
    raise ValueError(f"unknown grain {grain!r}")


def grain_of(partitions_def) -> str:
    if isinstance(partitions_def, HourlyPartitionsDefinition):
        return "hourly"
    if isinstance(partitions_def, DailyPartitionsDefinition):
        return "daily"
    raise ValueError(f"unsupported partitions definition {partitions_def!r}")


def partition_values(key: str, grain: str) -> dict[str, str]:
    """`2024-01-02` -> {dt}; `2024-01-02-05:00` -> {dt, hour}."""
    if grain == "daily":
        return {"dt": key}
    if grain == "hourly":
        day, _, hour = key.rpartition("-")
        return {"dt": day, "hour": hour[:2]}
    raise ValueError(f"unknown grain {grain!r}")
