"""A real asset backfill launched over the webserver's GraphQL (as the UI's launch dialog does) and run by the
daemon of `dagster dev`: it stops at the first failing partition, and re-executing it from the failure resumes
there, in order. No browser: GraphQL is what the UI sends (fixtures in conftest.py).
"""

from __future__ import annotations

import time
from datetime import date, timedelta
from pathlib import Path

import pytest

from sharp_dagster_tests.ui.conftest import land_days

pytestmark = pytest.mark.slow

LAUNCH_BACKFILL = """mutation($params: LaunchBackfillParams!) { launchPartitionBackfill(backfillParams: $params) {
  __typename ... on LaunchBackfillSuccess { backfillId } ... on PythonError { message } } }"""
REEXECUTE_BACKFILL = """mutation($params: ReexecutionParams!) { reexecutePartitionBackfill(reexecutionParams: $params) {
  __typename ... on LaunchBackfillSuccess { backfillId } ... on PythonError { message } } }"""
BACKFILL_STATUS = """query($id: String!) { partitionBackfillOrError(backfillId: $id) {
  __typename ... on PartitionBackfill { status } ... on PythonError { message } } }"""
MATERIALIZED = """query($key: AssetKeyInput!) { assetNodeOrError(assetKey: $key) {
  ... on AssetNode { partitionStats { numMaterialized } assetPartitionStatuses {
    ... on TimePartitionStatuses { ranges { status startKey endKey } } } } } }"""


def _wait_backfill(gql, backfill_id: str, timeout: float = 420) -> str:
    deadline = time.monotonic() + timeout
    status = "?"
    while time.monotonic() < deadline:
        status = gql(BACKFILL_STATUS, {"id": backfill_id})["partitionBackfillOrError"]["status"]
        if status not in ("REQUESTED", "CANCELING"):
            return status
        time.sleep(2)
    raise AssertionError(f"backfill {backfill_id} still {status} after {timeout}s")


def _materialized_days(gql) -> set[str]:
    node = gql(MATERIALIZED, {"key": {"path": ["ods", "product"]}})["assetNodeOrError"]
    days = set()
    for rng in node["assetPartitionStatuses"]["ranges"]:
        if rng["status"] != "MATERIALIZED":
            continue
        day = date.fromisoformat(rng["startKey"])
        while day <= date.fromisoformat(rng["endKey"]):
            days.add(day.isoformat())
            day += timedelta(days=1)
    return days


def test_backfill_from_the_webserver_stops_at_failure_and_resumes(dagster_dev, gql, ui_env, tmp_path):
    """A real asset backfill launched over the webserver's GraphQL (as the UI does) and run by the daemon."""
    from sharp_dagster.logdriven import job_log

    # Three partitions, the fewest that show it: day 3 has landed (prep) and runs; the injected failure is day 4,
    # whose binlog has not landed; day 5 must then never run. (Each partition is a run of its own, with its own
    # Spark driver: more days cost CI minutes and show nothing more.)
    days = ["2024-01-03", "2024-01-04", "2024-01-05"]
    launched = gql(
        LAUNCH_BACKFILL,
        {"params": {"partitionNames": days, "assetSelection": [{"path": ["ods", "product"]}]}},
    )
    backfill_id = launched["launchPartitionBackfill"]["backfillId"]
    status = _wait_backfill(gql, backfill_id)
    assert status in ("COMPLETED_FAILED", "FAILED"), status
    jl = job_log(f"sqlite:///{Path(ui_env['SHARP_DATA_DIR']) / 'sharp_log.db'}")
    rows = sorted((r.partition_key, r.attempt, r.status) for r in jl.recent("ods/product", limit=50))
    assert [r for r in rows if r[0] >= "2024-01-03"] == [
        ("2024-01-03", 1, "SUCCESS"),
        ("2024-01-04", 1, "FAILURE"),
    ], "the backfill did not stop at its failing partition 2024-01-04, or did not reach it"
    assert _materialized_days(gql) == {"2024-01-01", "2024-01-02", "2024-01-03"}

    # After the fix (days 4 and 5 landed), re-executing the backfill from its failure runs 04 then 05.
    land_days(ui_env, ["2024-01-04", "2024-01-05"], tmp_path)
    again = gql(REEXECUTE_BACKFILL, {"params": {"parentRunId": backfill_id, "strategy": "FROM_FAILURE"}})
    assert _wait_backfill(gql, again["reexecutePartitionBackfill"]["backfillId"]) in (
        "COMPLETED_SUCCESS",
        "COMPLETED",
    )
    runs = sorted(
        (
            (r.job_start_time, r.partition_key, r.attempt, r.status)
            for r in jl.recent("ods/product", limit=50)
        ),
    )
    tail = [(p, a, s) for _, p, a, s in runs if (p, a) in {("2024-01-04", 2), ("2024-01-05", 1)}]
    assert tail == [("2024-01-04", 2, "SUCCESS"), ("2024-01-05", 1, "SUCCESS")]
    assert not [r for r in runs if r[1] == "2024-01-03" and r[2] > 1], "a succeeded partition was run again"
    assert _materialized_days(gql) == {f"2024-01-0{d}" for d in range(1, 6)}, "job log and Dagster agree"
