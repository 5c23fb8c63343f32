"""What the next landing starts from (`cdc/landing/prior.py`) and what each staged ODS day's commits carry
(`cdc/ods/stage.day_properties`): plain functions over a job log stand-in, no Spark."""

from __future__ import annotations

import json
from types import SimpleNamespace

from sharp_dagster.cdc.landing.prior import prior_landing
from sharp_dagster.cdc.ods.stage import day_properties
from sharp_dagster.joblog.models import KAFKA_OFFSET


class Log:
    """The two job-log reads `prior_landing` makes: the last success and its steps."""

    def __init__(self, outputs: list[tuple[str, str]] | None):
        self.outputs, self.asked = outputs, []

    def last_success(self, job_name, order_by_range, incremental_type):
        self.asked.append((job_name, order_by_range, incremental_type))
        return None if self.outputs is None else SimpleNamespace(job_id="j1")

    def steps(self, job_id):
        return [SimpleNamespace(step_id=s, output=o) for s, o in self.outputs]


def test_prior_landing_is_the_land_step_output_of_the_last_success():
    data = {"watermarks_ms": {"0": 5}, "low_watermark_ms": 5, "first_seen_ms": 1}
    log = Log([("quarantine", "{}"), ("land", json.dumps(data) + "\nmore")])
    assert prior_landing(log, "original_binlog/shop") == data
    assert log.asked == [("original_binlog/shop", False, KAFKA_OFFSET)]


def test_no_prior_landing_is_empty():
    assert prior_landing(Log(None), "x") == {}
    assert prior_landing(Log([("land", "not json")]), "x") == {}
    assert prior_landing(Log([("land", "[1, 2]")]), "x") == {}
    assert prior_landing(Log([("quarantine", "{}")]), "x") == {}


def test_a_later_day_carries_the_last_run_of_the_rerun():
    attempts = {"2024-01-02": ("7", {"job_id": "a"}), "2024-01-03": ("8", {"job_id": "b"})}
    out = day_properties(attempts, ["2024-01-04"])
    assert out == {
        "2024-01-02": {"sharp.token": "7", "sharp.job_id": "a", "sharp.day": "2024-01-02"},
        "2024-01-03": {"sharp.token": "8", "sharp.job_id": "b", "sharp.day": "2024-01-03"},
        "2024-01-04": {"sharp.token": "8", "sharp.job_id": "b", "sharp.day": "2024-01-04"},
    }
