"""The ODS's "day before D" and its published days, decided in one place (`cdc/ods/versions.py`), read once per
stage by the caller and passed on (no Spark: the published days are given)."""

from __future__ import annotations

import pytest

from sharp_dagster.cdc.ods import merge as ods_merge
from sharp_dagster.cdc.ods.versions import days_after, previous_day, start_of
from sharp_dagster.cdc.source.config import snapshot_day

PUBLISHED = ["2023-12-31", "2024-01-01", "2024-01-02"]


def test_previous_day_is_the_calendar_day_before_a_day_tag():
    assert previous_day("2024-03-01") == "2024-02-29"
    assert previous_day("2024-01-01") == snapshot_day("2024-01-01") == "2023-12-31"  # the bootstrap's day
    with pytest.raises(ValueError, match="not a partition key"):
        previous_day("2024-01-01-05:00")


def test_start_of_needs_the_previous_day_published():
    assert start_of("2024-01-01", PUBLISHED) == "2023-12-31"
    assert start_of("2024-01-03", PUBLISHED) == "2024-01-02"
    assert start_of("2024-01-05", PUBLISHED) is None


def test_days_after_are_the_later_published_days():
    assert days_after(PUBLISHED, "2024-01-01") == ["2024-01-02"]
    assert days_after(PUBLISHED, "2024-01-02") == []


def test_predecessor_uses_the_published_days_it_is_given():
    # Given the days, the merge reads no table (no store at all here).
    assert ods_merge.predecessor(None, "orders", "2024-01-02", PUBLISHED) == "2024-01-01"
    with pytest.raises(LookupError, match="no published state of 2024-01-03"):
        ods_merge.predecessor(None, "orders", "2024-01-04", PUBLISHED)
