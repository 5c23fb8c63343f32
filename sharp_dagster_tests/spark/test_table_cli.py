"""`sharp-dagster sql` / `table history` / `table rollback` through `sharp_dagster.cli.main`, on real Iceberg tables
(the shared Spark session) and a real SQLite job log, both in the test's own folder (`SHARP_WAREHOUSE_DIR`,
`SHARP_LOG_DB_URL` point the command's settings there)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

import pytest

from sharp_dagster.cdc.ods import store as ods_store
from sharp_dagster.cdc.ods.read import day_snapshots
from sharp_dagster.cli.main import main
from sharp_dagster.joblog.models import FAILURE, RUNNING, SUCCESS
from sharp_dagster.joblog.planner import check_upstream_done
from sharp_dagster.joblog.store import JobLog
from sharp_dagster.periods import PeriodSpec
from sharp_dagster.spark.tables import TableRef
from sharp_dagster.spark.wap import StalePublishError, snapshot_properties
from sharp_dagster_tests.conftest import fresh_tables
from sharp_dagster_tests.ods_days_support import BOOT, DAY1, DAY2, publish_orders

ASSET = "dwd/order_detail"  # a log-driven asset of the project (daily from 2024-01-01), a `dt` table
SPEC = PeriodSpec("daily", datetime(2024, 1, 1))
REF = TableRef("dwd", "order_detail")


@dataclass
class Published:
    snapshot_id: int
    job_id: str
    attempt: int


@pytest.fixture
def wh(spark, tmp_path, monkeypatch):
    monkeypatch.setenv("SHARP_WAREHOUSE_DIR", str(tmp_path / "warehouse"))
    monkeypatch.setenv("SHARP_LOG_DB_URL", f"sqlite:///{tmp_path / 'sharp_log.db'}")
    tables = fresh_tables(spark, tmp_path)  # the same catalog the command's settings resolve to
    return tables, JobLog(f"sqlite:///{tmp_path / 'sharp_log.db'}")


def _publish(tables, jl: JobLog, day: str, tag: str, rows: int) -> Published:
    """One log-driven attempt of `day`: claim, publish with the attempt's snapshot properties, SUCCESS."""
    handle = jl.claim(ASSET, SPEC.period_for_key(day), f"run-{day}-{tag}", partition_key=day)
    df = tables.spark.createDataFrame([(i, tag, day) for i in range(rows)], "id BIGINT, v STRING, dt STRING")
    tables.write_partition(
        REF,
        {"dt": day},
        df,
        token=str(handle.attempt),
        properties={"job_id": handle.job_id, "partition": day, "run_id": handle.run_id, "job_name": ASSET},
    )
    jl.finish(handle, SUCCESS)
    return Published(tables.current_snapshot_id(REF), handle.job_id, handle.attempt)


def _content(tables) -> dict[str, tuple[int, str]]:
    rows = tables.spark.sql(
        f"SELECT dt, count(*) AS n, concat_ws(',', sort_array(collect_set(v))) AS tags FROM {tables.name(REF)} "
        "GROUP BY dt"
    ).collect()
    return {r.dt: (r.n, r.tags) for r in rows}


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_sql_reads_tables_by_name(wh, capsys):
    tables, jl = wh
    _publish(tables, jl, "2024-01-01", "a", 3)
    _publish(tables, jl, "2024-01-02", "a", 2)

    code, out, err = _run(
        capsys, "sql", "select dt, count(*) as n from dwd.order_detail group by dt order by dt"
    )
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["dt", "n"] and set(lines[1].replace(" ", "")) == {"-"}
    assert [line.split() for line in lines[2:4]] == [["2024-01-01", "3"], ["2024-01-02", "2"]]
    assert lines[2].index("3") == lines[0].index("n")  # aligned under its header
    assert lines[4] == "(2 rows)"

    code, out, err = _run(
        capsys,
        "sql",
        "select id, v from dwd.order_detail order by dt, id",
        "--format",
        "json",
        "--limit",
        "2",
    )
    assert code == 0 and json.loads(out) == [{"id": 0, "v": "a"}, {"id": 1, "v": "a"}]
    assert "first 2 rows shown" in err

    code, out, _ = _run(
        capsys, "sql", "select dt, v from dwd.order_detail where dt = '2024-01-02' limit 1", "--format", "csv"
    )
    assert code == 0 and out == "dt,v\n2024-01-02,a\n"

    code, out, err = _run(capsys, "sql", "select no_such_column from dwd.order_detail")
    assert code == 2 and out == ""
    assert "SQL failed" in err and "no_such_column" in err
    assert "\tat " not in err and "py4j" not in err.lower()


def test_history_names_the_attempt_of_every_publish(wh, capsys):
    tables, jl = wh
    first = _publish(tables, jl, "2024-01-01", "a", 3)
    again = _publish(tables, jl, "2024-01-01", "b", 4)

    code, out, _ = _run(capsys, "table", "history", "dwd/order_detail", "--format", "json")
    assert code == 0
    snaps = json.loads(out)["snapshots"]
    published = [s for s in snaps if s["job_id"]]
    assert [(s["snapshot_id"], s["token"], s["job_id"], s["partition"]) for s in published] == [
        (first.snapshot_id, "1", first.job_id, "2024-01-01"),
        (again.snapshot_id, "2", again.job_id, "2024-01-01"),
    ]
    assert [s["snapshot_id"] for s in snaps if s["current"]] == [again.snapshot_id]
    assert published[1]["added_records"] == 4 and published[1]["deleted_records"] == 3

    code, out, _ = _run(capsys, "table", "history", "dwd.order_detail")
    assert code == 0
    row = next(line for line in out.splitlines() if line.startswith(str(again.snapshot_id)))
    assert " * " in row and again.job_id in row and "2024-01-01" in row

    code, _, err = _run(capsys, "table", "history", "ods/nothing_here")
    assert code == 2 and "unknown table ods.nothing_here" in err
    code, _, err = _run(capsys, "table", "history", "orders")
    assert code == 2 and "layer/table" in err


def test_rollback_restores_rows_and_writes_failure_to_the_job_log(wh, capsys):
    tables, jl = wh
    day1 = _publish(tables, jl, "2024-01-01", "a", 3)
    good = _publish(tables, jl, "2024-01-02", "good", 5)
    bad = _publish(tables, jl, "2024-01-02", "bad", 1)
    assert _content(tables) == {"2024-01-01": (3, "a"), "2024-01-02": (1, "bad")}

    code, out, _ = _run(
        capsys,
        "table",
        "rollback",
        "dwd/order_detail",
        "--to",
        str(good.snapshot_id),
        "--reason",
        "bad upstream file",
    )
    assert code == 0, out
    assert f"main restored to snapshot {good.snapshot_id} (was {bad.snapshot_id})" in out
    assert f"undone: snapshot {bad.snapshot_id}" in out
    assert _content(tables) == {"2024-01-01": (3, "a"), "2024-01-02": (5, "good")}
    assert tables.current_snapshot_id(REF) == good.snapshot_id

    (latest,) = jl.recent(ASSET, 1)
    assert (latest.partition_key, latest.status, latest.attempt) == ("2024-01-02", FAILURE, 3)
    assert latest.error == (
        f"rolled back: dwd.order_detail restored to snapshot {good.snapshot_id} (snapshot {bad.snapshot_id}, "
        f"published by attempt 2 / job id {bad.job_id}, undone): bad upstream file"
    )
    (step,) = jl.get(latest.job_id).steps
    assert step.step_id == "rollback" and "reason: bad upstream file" in step.output
    # Downstream's upstream gate refuses the day until it is re-run; the other day is untouched.
    assert not check_upstream_done(
        jl, ASSET, SPEC, SPEC.period_for_key("2024-01-02").start, SPEC.period_for_key("2024-01-02").end
    ).ok
    assert check_upstream_done(
        jl, ASSET, SPEC, SPEC.period_for_key("2024-01-01").start, SPEC.period_for_key("2024-01-01").end
    ).ok

    # The undone snapshot is no longer an ancestor of main: refused, nothing changed.
    before = jl.recent(ASSET, 50)
    code, _, err = _run(capsys, "table", "rollback", "dwd.order_detail", "--to", str(bad.snapshot_id))
    assert code == 2 and "refused, nothing changed" in err and "not an ancestor" in err
    assert tables.current_snapshot_id(REF) == good.snapshot_id and jl.recent(ASSET, 50) == before

    # A period that a live run holds: refused, nothing changed.
    live = jl.claim(ASSET, SPEC.period_for_key("2024-01-02"), "run-live", partition_key="2024-01-02")
    code, _, err = _run(capsys, "table", "rollback", "dwd/order_detail", "--to", str(day1.snapshot_id))
    assert code == 2 and "claimed by run run-live" in err
    assert tables.current_snapshot_id(REF) == good.snapshot_id
    assert jl.get(live.job_id).status == RUNNING and jl.recent(ASSET, 50)[1:] == before
    assert _content(tables) == {"2024-01-01": (3, "a"), "2024-01-02": (5, "good")}


def test_table_rollback_refuses_when_main_moved_since_it_was_read(wh):
    tables, jl = wh
    day1 = _publish(tables, jl, "2024-01-01", "a", 3)
    day2 = _publish(tables, jl, "2024-01-02", "a", 2)
    with pytest.raises(StalePublishError, match=f"main moved to snapshot {day2.snapshot_id}"):
        tables.rollback(REF, day1.snapshot_id, expected_head=day1.snapshot_id)
    assert tables.current_snapshot_id(REF) == day2.snapshot_id
    assert tables.rollback(REF, day1.snapshot_id, expected_head=day2.snapshot_id) == day2.snapshot_id
    assert tables.current_snapshot_id(REF) == day1.snapshot_id


def test_rollback_of_an_ods_table_goes_back_to_a_day(wh, capsys):
    """An ODS table (issue 33: one tag per published day) is rolled back to a day: `main` of both tables moves to
    the day's tag, the later tags go, and each later day gets a FAILURE attempt with a `rollback` step. `table
    history` names the attempt of each day whose commits carry it (`sharp.*`, as the ODS asset writes them)."""
    tables, jl = wh
    ods = "ods/orders"
    who = {
        day: snapshot_properties(str(n), {"job_id": f"job-{day}", "run_id": f"run-{day}", "day": day})
        for n, day in ((3, BOOT), (5, DAY1))  # DAY2's commits name no attempt: the job log names it below
    }
    chain = publish_orders(tables, [DAY1, DAY2], properties=who)
    days = {d["day"]: d["snapshot_id"] for d in day_snapshots(tables, "orders")}
    assert sorted(days) == [BOOT, DAY1, DAY2]

    code, out, err = _run(capsys, "table", "history", ods, "--format", "json")
    assert code == 0, err
    listed = json.loads(out)["days"]
    assert [(d["day"], d["snapshot_id"], d["main"]) for d in listed] == [
        (BOOT, days[BOOT], False),
        (DAY1, days[DAY1], False),
        (DAY2, days[DAY2], True),
    ]
    assert [d["rows"] for d in listed] == [
        chain[d].where("NOT _is_deleted").count() for d in (BOOT, DAY1, DAY2)
    ]
    assert [(d["token"], d["job_id"], d["run_id"]) for d in listed] == [
        ("3", f"job-{BOOT}", f"run-{BOOT}"),
        ("5", f"job-{DAY1}", f"run-{DAY1}"),
        (None, None, None),
    ]
    for table in ("ods.orders", "ods_state.orders"):  # both tables' commits of the day, on the staging branch
        summaries = [r.summary for r in tables.spark.sql(f"SELECT summary FROM {table}.snapshots").collect()]
        assert any(s.get("sharp.day") == DAY1 and s.get("sharp.token") == "5" for s in summaries), table
    code, out, _ = _run(capsys, "table", "history", "ods.orders")
    assert code == 0 and "3 published day(s), each a tag" in out
    assert next(line for line in out.splitlines() if line.startswith(DAY2)).split()[1] == str(days[DAY2])
    assert next(line for line in out.splitlines() if line.startswith(DAY1)).split()[-2:] == [
        "5",
        f"job-{DAY1}",
    ]

    # Refused, nothing changed: a snapshot that is no day's tag, a day never published, the tombstones alone,
    # --to-day of a `dt` table, a day a live run holds.
    _publish(tables, jl, "2024-01-01", "a", 1)
    for argv, expected in (
        (["--to", "12345"], "snapshot 12345 is no published day's tag"),
        (["--to-day", "2024-02-01"], "day 2024-02-01 is not published"),
        (["--to-day", "2024-2-3"], "is not a partition key"),
    ):
        code, _, err = _run(capsys, "table", "rollback", ods, *argv)
        assert code == 2 and expected in err, err
    code, _, err = _run(capsys, "table", "rollback", "ods_state/orders", "--to-day", BOOT)
    assert code == 2 and "roll back ods.orders" in err
    code, _, err = _run(capsys, "table", "rollback", "dwd/order_detail", "--to-day", BOOT)
    assert code == 2 and "--to-day is for an ODS table" in err
    live = jl.claim(ods, SPEC.period_for_key(DAY2), "run-live", partition_key=DAY2)
    code, _, err = _run(capsys, "table", "rollback", ods, "--to-day", BOOT)
    assert code == 2 and "claimed by run run-live" in err
    jl.finish(live, SUCCESS)
    assert ods_store.published_days(tables, "orders") == [BOOT, DAY1, DAY2]
    assert [r.partition_key for r in jl.recent(ods, 10)] == [DAY2]

    code, out, err = _run(capsys, "table", "rollback", ods, "--to", str(days[BOOT]), "--reason", "bad binlog")
    assert code == 0, err
    assert f"ods.orders: main restored to day {BOOT} (tag {BOOT}, snapshot {days[BOOT]}" in out
    assert "2 later day(s) no longer published" in out
    assert ods_store.published_days(tables, "orders") == [BOOT]
    for table in ("ods.orders", "ods_state.orders"):
        latest = tables.spark.sql(f"SELECT * FROM {table}").collect()
        assert sorted(map(tuple, latest)) == sorted(
            map(tuple, tables.spark.sql(f"SELECT * FROM {table} VERSION AS OF '{BOOT}'").collect())
        )
    assert tables.spark.sql("SELECT count(*) FROM ods.orders").first()[0] == chain[BOOT].count()

    failures = {r.partition_key: r for r in jl.recent(ods, 10) if r.status == FAILURE}
    assert sorted(failures) == [DAY1, DAY2]
    # DAY1's snapshot names its attempt; DAY2's names none: the job log's SUCCESS of the day does.
    by = {
        DAY1: f", published by attempt 5 / job id job-{DAY1}",
        DAY2: f", published by attempt 1 / job id {live.job_id}",
    }
    for day in (DAY1, DAY2):
        assert failures[day].error == (
            f"rolled back: ods.orders restored to day {BOOT} (tag {BOOT}, snapshot {days[BOOT]}) "
            f"(day {day} (tag {day} at snapshot {days[day]}{by[day]}), undone): bad binlog"
        )
        (step,) = jl.get(failures[day].job_id).steps
        assert step.step_id == "rollback" and f"undone: day {day} (no longer published)" in step.output
        period = SPEC.period_for_key(day)
        assert not check_upstream_done(jl, ods, SPEC, period.start, period.end).ok

    code, _, err = _run(capsys, "table", "rollback", ods, "--to-day", BOOT)
    assert code == 2 and f"already at day {BOOT}" in err

    # A day that changed nothing commits nothing: its tag is at the day before's snapshot, which names that
    # day's attempt, so the day names none (the job log's SUCCESS of it does).
    quiet = "2024-01-09"
    tables.commit_refs(TableRef("ods", "orders"), lambda t: t.manageSnapshots().createTag(quiet, days[DAY1]))
    named = {d["day"]: d["properties"].get("job_id") for d in day_snapshots(tables, "orders")}
    assert named == {BOOT: f"job-{BOOT}", quiet: None}
