"""Dagster's time-window partitions: one definition per (grain, start), shared by every asset of a grain. What a
key means (its window, its partition columns) is `sharp_dagster.periods`."""

from __future__ import annotations

from functools import cache

from dagster import DailyPartitionsDefinition, HourlyPartitionsDefinition, TimeWindowPartitionsDefinition


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
