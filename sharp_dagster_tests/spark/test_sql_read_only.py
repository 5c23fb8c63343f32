"""`sharp-dagster sql` is read-only: Spark's own parser judges the statement and only queries, SHOW, DESCRIBE and
EXPLAIN of a query run. Every writing statement, every CALL and every session command is refused with one line
naming the command that does it properly, and the table it aimed at is left as it was (same snapshot, same rows).
Real Iceberg tables in the shared Spark session, a real SQLite job log, through `sharp_dagster.cli.main`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sharp_dagster.cli.main import main
from sharp_dagster.spark.tables import TableRef
from sharp_dagster_tests.conftest import fresh_tables

REF = TableRef("ods", "orders")


@pytest.fixture(scope="module")
def wh(spark, tmp_path_factory):
    """A warehouse with ods.orders (3 rows, one snapshot); the command's settings point at it."""
    folder = tmp_path_factory.mktemp("sql_read_only")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SHARP_WAREHOUSE_DIR", str(folder / "warehouse"))
        mp.setenv("SHARP_LOG_DB_URL", f"sqlite:///{folder / 'sharp_log.db'}")
        tables = fresh_tables(spark, folder)
        df = spark.createDataFrame(
            [(i, "a", "2024-01-01") for i in range(3)], "id BIGINT, v STRING, dt STRING"
        )
        tables.write_partition(REF, {"dt": "2024-01-01"}, df, token="1")
        head = tables.current_snapshot_id(REF)  # a day's tag, as an ODS table keeps its days (issue 33)
        tables.commit_refs(REF, lambda t: t.manageSnapshots().createTag("2024-01-01", head))
        yield tables


def _state(tables) -> tuple:
    """The table's current snapshot: any write, rollback or drop changes it (or makes the table go)."""
    return tables.exists(REF), tables.current_snapshot_id(REF)


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


WRITES = [
    ("insert into ods.orders values (9, 'x', '2024-01-01')", "a SQL asset"),
    ("INSERT OVERWRITE TABLE ods.orders SELECT * FROM ods.orders", "a SQL asset"),
    ("insert into ods.orders table ods.orders", "a SQL asset"),
    ("with a as (select * from ods.orders) insert into ods.orders select * from a", "a SQL asset"),
    ("from ods.orders insert into ods.orders select *", "a SQL asset"),
    ("/* tidy up */ delete from ods.orders where true", "log rerun"),
    ("DeLeTe FROM ods.orders -- everything\n WHERE true", "log rerun"),
    ("delete from `ods`.`orders`", "log rerun"),
    ("update ods.orders set v = 'y'", "log rerun"),
    (
        "merge into ods.orders t using (select 1 as id) s on t.id = s.id when matched then delete",
        "a SQL asset",
    ),
    ("create table ods.x (a int)", "SQL assets under sharp_dagster/warehouse/"),
    ("create table ods.x as select 1 as a", "a SQL asset"),
    ("create view ods.v as select 1 as a", "SQL assets under"),
    ("create or replace temp view v as select 1 as a", "SQL assets under"),
    ("alter table ods.orders add column c int", "SQL assets under"),
    ("alter table ods.orders rename to ods.gone", "SQL assets under"),
    ("drop table ods.orders", "table rollback"),
    ("DROP TABLE IF EXISTS ods.orders PURGE", "table rollback"),
    ("truncate table ods.orders", "table rollback"),
    ("msck repair table ods.orders", "SQL assets under"),
    ("analyze table ods.orders compute statistics", "SQL assets under"),
    ("call sharp.system.rollback_to_snapshot('ods.orders', 1)", "sharp-dagster table rollback"),
    ("CALL system.expire_snapshots(table => 'ods.orders')", "sharp-dagster table rollback"),
    (
        "  /* c */ Call sharp.system.remove_orphan_files(table => 'ods.orders')",
        "sharp-dagster table rollback",
    ),
    ("call sharp.system.set_current_snapshot('ods.orders', 1);", "sharp-dagster table rollback"),
    ("explain insert into ods.orders select * from ods.orders", "a SQL asset"),
    ("EXPLAIN EXTENDED delete from ods.orders where true", "log rerun"),
    ("explain call sharp.system.rollback_to_snapshot('ods.orders', 1)", ""),
    ("set spark.sql.runSQLOnFiles=true", "SHARP_SPARK_CONF"),
    ("set", "SHARP_SPARK_CONF"),
    ("reset", "SHARP_SPARK_CONF"),
    ("add jar /tmp/nothing.jar", "SHARP_SPARK_CONF"),
    ("cache table ods.orders", "SHARP_SPARK_CONF"),
    ("uncache table ods.orders", "SHARP_SPARK_CONF"),
    ("refresh table ods.orders", "SHARP_SPARK_CONF"),
    ("use ods", "SHARP_SPARK_CONF"),
    ("clear cache", "SHARP_SPARK_CONF"),
    ("declare v int", "SHARP_SPARK_CONF"),
    ("execute immediate 'drop table ods.orders'", "runs one query"),
    ("select transform(id) using 'cat' as (x) from ods.orders", "runs one query"),
    ("select 1; drop table ods.orders", "SQL failed"),
    ("select reflect('java.lang.System', 'exit', 3)", "reflect"),
    ("select id from ods.orders where JAVA_METHOD('java.lang.Thread', 'sleep', 1L) is null", "java_method"),
    ("select * from (select try_reflect('java.lang.System', 'getenv', 'HOME') as h)", "try_reflect"),
    ("select identifier('reflect')('java.lang.System', 'exit', 3)", "IDENTIFIER"),
    ("begin drop table ods.orders; end", ""),
    ("insert into ods.orders select * from ods.orders version as of '2024-01-01'", "a SQL asset"),
]


@pytest.mark.parametrize(("statement", "names"), WRITES, ids=[s[:40] for s, _ in WRITES])
def test_sql_refuses_every_statement_that_is_not_a_query(wh, capsys, statement, names):
    before = _state(wh)
    files_on_files = wh.spark.conf.get("spark.sql.runSQLOnFiles")
    code, out, err = _run(capsys, "sql", statement)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert "read-only" in err or "SQL failed" in err, err
    assert names in err, err
    assert "Traceback" not in err and "\tat " not in err
    assert _state(wh) == before
    assert wh.spark.conf.get("spark.sql.runSQLOnFiles") == files_on_files  # put back after the command


def test_sql_still_answers_queries_show_describe_and_explain(wh, capsys):
    queries = {
        "select count(*) as n from ods.orders": "3",
        "with a as (select id from ods.orders where id > 0) select count(*) as n from a": "2",
        "values (41, 'x')": "41",
        "table ods.orders": "(3 rows)",
        "select * from ods.orders where id in (select max(id) from ods.orders)": "(1 row)",
        "select snapshot_id from ods.orders.snapshots": str(wh.current_snapshot_id(REF)),
        "show tables in ods": "orders",
        "SHOW CREATE TABLE ods.orders": "CREATE TABLE",
        "describe ods.orders": "bigint",
        "describe query select v from ods.orders": "string",
        "explain select * from ods.orders where id = 1": "Physical Plan",
        # A day of an ODS table is its tag: a time-travel read is a read.
        "select count(*) as n from ods.orders version as of '2024-01-01' where id > 0": "2",
        "select count(*) as n from ods.orders for system_version as of '2024-01-01'": "3",
    }
    assert not wh.spark.catalog.tableExists("sharp.ods.x")  # nothing the refused statements named was created
    for statement, expected in queries.items():
        code, out, err = _run(capsys, "sql", statement)
        assert code == 0, (statement, err)
        assert expected in out, (statement, out)
    code, out, _ = _run(capsys, "sql", "select id from ods.orders order by id", "--format", "json")
    assert code == 0 and json.loads(out) == [{"id": 0}, {"id": 1}, {"id": 2}]


def test_sql_reads_no_file_by_path(wh, capsys, tmp_path):
    """`runSQLOnFiles` is off while the command runs: a path relation beside the warehouse is not read."""
    path = Path(tmp_path) / "outside"
    wh.spark.createDataFrame([(1,)], "secret INT").write.parquet(str(path))
    code, out, err = _run(capsys, "sql", f"select * from parquet.`{path}`")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "SQL failed" in err
