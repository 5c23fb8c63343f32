"""`sharp-dagster log ...`: status, plan, takeover and rerun's argument checks through the real command-line entry
point. The rerun itself runs Dagster and Spark: see sharp_dagster_tests/logdriven/test_rerun.py."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from sharp_dagster.cli import main as cli
from sharp_dagster.joblog.models import FAILURE, SUCCESS
from sharp_dagster.joblog.store import JobLog, utcnow
from sharp_dagster.periods import PeriodSpec
from sharp_dagster_tests.joblog.pgserver import free_port

ASSET = "dwd/orders"
# Five days that have all elapsed, ending with yesterday: the spec's end fixes the plan whatever the clock says when
# the test runs (a run crossing midnight once saw a sixth period here).
START = (utcnow() - timedelta(days=6)).replace(hour=0, minute=0, second=0, microsecond=0)
SPEC = PeriodSpec("daily", START, START + timedelta(days=5))


def _day(offset: int) -> str:
    return (START + timedelta(days=offset)).strftime("%Y-%m-%d")


@pytest.fixture
def project(monkeypatch):
    """Log-driven assets of the tests' own (a daily and an hourly one whose periods have all elapsed).

    Returns the calls that reached `cli/rerun.rerun_periods`: the tests here check what the command line
    refuses before any run starts, so a call there is recorded and refused (the real re-run is tested in
    logdriven/test_rerun.py).
    """
    from sharp_dagster.cli import rerun as orchestration

    calls: list[tuple[str, list]] = []

    def must_not_run(key, periods, out=None):
        calls.append((key, list(periods)))
        raise AssertionError(f"rerun_periods reached for {key}: the command line should have refused")

    from sharp_dagster.cli import log as log_cli

    monkeypatch.setattr(
        log_cli, "known_assets", lambda: {ASSET: SPEC, "ods/clicks": PeriodSpec("hourly", START, SPEC.end)}
    )
    monkeypatch.setattr(orchestration, "rerun_periods", must_not_run)
    return calls


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def history(db_url):
    """Day 0 done (with counts), day 1 failed, day 2 running since long ago (stale), days 3 and 4 never run."""
    stale_clock = lambda: utcnow() - timedelta(hours=1)  # noqa: E731
    job_log = JobLog(db_url, clock=stale_clock)
    stuck = job_log.claim(ASSET, SPEC.period_for_key(_day(2)), "run-stuck")
    job_log = JobLog(db_url)
    ok = job_log.claim(ASSET, SPEC.period_for_key(_day(0)), "run-ok")
    with job_log.step(ok, "read", source_type="jdbc") as step:
        step.source_count = 1234
    with job_log.step(ok, "write", target_type="parquet") as step:
        step.target_count = 1200
    job_log.finish(ok, SUCCESS)
    bad = job_log.claim(ASSET, SPEC.period_for_key(_day(1)), "run-bad")
    job_log.finish(bad, FAILURE, "Spark stage failed\nmore detail")
    return {"url": db_url, "stuck": stuck, "ok": ok, "bad": bad}


def test_status(project, history, capsys):
    code, out, _ = run_cli(capsys, "log", "--db-url", history["url"], "status", "--asset", ASSET)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split()[:5] == ["ASSET", "PARTITION", "STATUS", "TRY", "RANGE"]
    ok_line = next(line for line in lines if "run-ok" in line)
    assert _day(0) in ok_line and "SUCCESS" in ok_line and "1234" in ok_line and "1200" in ok_line
    assert "Spark stage failed" in next(line for line in lines if "run-bad" in line)
    assert "RUNNING" in next(line for line in lines if "run-stuck" in line)

    code, out, _ = run_cli(capsys, "log", "--db-url", history["url"], "status", "--json", "--limit", "2")
    rows = json.loads(out)
    assert code == 0 and len(rows) == 2
    assert {r["run_id"] for r in rows} == {"run-ok", "run-bad"}
    ok = next(r for r in rows if r["run_id"] == "run-ok")
    assert (ok["source_count"], ok["target_count"], ok["status"]) == (1234, 1200, SUCCESS)
    assert ok["duration_s"] is not None and ok["duration_s"] >= 0


def test_plan(project, history, capsys):
    code, out, _ = run_cli(capsys, "log", "--db-url", history["url"], "plan", "--asset", ASSET)
    assert code == 0
    assert f"{ASSET} (daily from {START:%Y-%m-%d} 00:00 UTC): 3 pending" in out
    assert f"{_day(1)} (FAILURE, run run-bad)" in out
    assert f"{_day(3)} .. {_day(4)} (never run, 2 daily periods)" in out
    assert f"running: {_day(2)} (run run-stuck" in out
    code, out, _ = run_cli(capsys, "log", "--db-url", history["url"], "plan", "--asset", ASSET, "--json")
    plan = json.loads(out)
    assert [p["partition_key"] for p in plan["pending"]] == [_day(1), _day(3), _day(4)]
    assert plan["pending"][0]["status"] == FAILURE and plan["running"][0]["run_id"] == "run-stuck"


def test_takeover(project, history, capsys):
    url, stuck = history["url"], history["stuck"]
    code, out, _ = run_cli(capsys, "log", "--db-url", url, "takeover", stuck.job_id)
    assert code == 0 and f"job {stuck.job_id}" in out and "is now FAILURE" in out
    assert JobLog(url).get(stuck.job_id).error.startswith("taken over from the command line")
    code, _, err = run_cli(capsys, "log", "--db-url", url, "takeover", stuck.job_id)
    assert code == 2 and "not RUNNING" in err and len(err.strip().splitlines()) == 1
    code, _, err = run_cli(capsys, "log", "--db-url", url, "takeover", "nope")
    assert code == 2 and "no job with job_id 'nope'" in err
    fresh = JobLog(url).claim(ASSET, SPEC.period_for_key(_day(3)), "run-live")
    code, _, err = run_cli(capsys, "log", "--db-url", url, "takeover", fresh.job_id)
    assert code == 2 and "force" in err
    code, out, _ = run_cli(
        capsys, "log", "--db-url", url, "takeover", fresh.job_id, "--force", "--reason", "x"
    )
    assert code == 0 and "is now FAILURE: x" in out


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["plan", "--asset", "nope/table"],
            "unknown asset 'nope/table' (log-driven assets: dwd/orders, ods/clicks)",
        ),
        (["plan", "--asset", "orders"], "asset key 'orders' is malformed: write it as layer/table"),
        (["rerun", "--asset", ASSET, "--from", "2024-02-30", "--to", "2024-03-01"], "is not a date"),
        (["rerun", "--asset", ASSET, "--from", _day(3), "--to", _day(1)], "empty range"),
        (["rerun", "--asset", "x/y", "--from", _day(1), "--to", _day(2)], "unknown asset 'x/y'"),
        (["status", "--asset", "ghost/table"], "unknown asset 'ghost/table'"),
        (["status", "--limit", "0"], "argument --limit: must be from 1 to 1000000, got 0"),
        (["status", "--limit", "1e20"], "argument --limit: expected a whole number from 1 to 1000000"),
    ],
)
def test_errors_are_one_line(project, tmp_path, capsys, argv, expected):
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    JobLog(url)  # an empty job log: the commands read one that exists
    code, out, err = run_cli(capsys, "log", "--db-url", url, *argv)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and expected in err
    assert project == []


def test_unreachable_database_error(project, capsys):
    url = f"postgresql+psycopg://etl:Pw0rdX@127.0.0.1:{free_port()}/log"
    code, _, err = run_cli(capsys, "log", "--db-url", url, "status")
    assert code == 2 and "cannot reach the job-log database" in err and "Pw0rdX" not in err
    assert len(err.strip().splitlines()) == 1
