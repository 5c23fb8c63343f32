"""`sharp-dagster log rerun` and `cli/rerun.rerun_periods` for real: Dagster runs in the project's instance
(DAGSTER_HOME) over a small warehouse with real Spark, one run per period, in order, stopping at the first failure.
"""

from __future__ import annotations

import io

from dagster import AssetKey, DagsterInstance, RunsFilter

from sharp_dagster.cli import main as cli
from sharp_dagster.joblog.planner import refresh_periods
from sharp_dagster.logdriven import REFRESH_TAG
from sharp_dagster.warehouse.layout import layout

ASSET = "ods/product"


def product_rows(jl):
    """(partition, attempt, status) of ods/product in the order the runs started."""
    rows = sorted(jl.recent(ASSET, limit=100), key=lambda r: (r.job_start_time, r.attempt))
    return [(r.partition_key, r.attempt, r.status) for r in rows]


def test_rerun_runs_periods_in_order_and_stops_at_the_first_failure(own_feed, tmp_path, monkeypatch, capsys):
    from sharp_dagster.cli.rerun import rerun_periods
    from sharp_dagster.logdriven import job_log

    home = tmp_path / "dagster_home"
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    for day in ("2024-01-01", "2024-01-02"):
        own_feed.land(day)
    jl = job_log()

    # The command line: two never-run days, each one Dagster run tagged as a refresh, in order.
    code = cli.main(["log", "rerun", "--asset", ASSET, "--from", "2024-01-01", "--to", "2024-01-02"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "re-running 2 daily period(s) of ods/product in order: 2024-01-01 .. 2024-01-02" in out
    assert out.index("[1/2] ods/product 2024-01-01") < out.index("[2/2] ods/product 2024-01-02"), out
    assert product_rows(jl) == [("2024-01-01", 1, "SUCCESS"), ("2024-01-02", 1, "SUCCESS")]
    with DagsterInstance.get() as instance:  # the runs are in the project's instance, where the UI shows them
        runs = instance.get_runs(RunsFilter(tags={REFRESH_TAG: "true"}))
        assert sorted(r.tags.get("dagster/partition") for r in runs) == ["2024-01-01", "2024-01-02"]
        assert all(r.is_success for r in runs), [(r.run_id, r.status) for r in runs]
        assert instance.get_materialized_partitions(AssetKey(["ods", "product"])) == {
            "2024-01-01",
            "2024-01-02",
        }

    # The API over four days: the two done days run again (a refresh), day 3 fails (its binlog has not landed),
    # day 4 is not attempted.
    periods = refresh_periods(layout().log_assets[ASSET].spec, "2024-01-01", "2024-01-04")
    report = io.StringIO()
    assert rerun_periods(ASSET, periods, out=report) == 1
    text = report.getvalue()
    assert "[3/4] ods/product 2024-01-03" in text and "FAILED" in text, text
    assert "the binlog of 2024-01-03 has not fully landed" in text, text
    assert "1 later period(s) not run" in text and "[4/4]" not in text, text
    assert product_rows(jl) == [
        ("2024-01-01", 1, "SUCCESS"),
        ("2024-01-02", 1, "SUCCESS"),
        ("2024-01-01", 2, "SUCCESS"),
        ("2024-01-02", 2, "SUCCESS"),
        ("2024-01-03", 1, "FAILURE"),
    ]
    with DagsterInstance.get() as instance:
        assert len(instance.get_runs(RunsFilter(tags={REFRESH_TAG: "true"}))) == 5
