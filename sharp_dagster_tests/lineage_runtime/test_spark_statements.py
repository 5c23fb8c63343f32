"""The plan reader and the comparison on real Spark statements: where the parser is right, Spark's analyzed plan
gives the same tables and columns; where a view hides the table, the difference names both answers."""

from __future__ import annotations

import pytest

from sharp_dagster.lineage.parser import parse_script
from sharp_dagster.lineage.runtime import compare
from sharp_dagster.lineage.spark_plan import analyzed_plan_json, plan_lineage
from sharp_dagster.spark.tables import TableRef

SCHEMA = {
    "lrt_src.orders": {"order_id": "", "user_id": "", "amount": "", "status": "", "tags": "", "dt": ""},
    "lrt_src.users": {"user_id": "", "city": "", "level": "", "dt": ""},
}
TARGET = "lrt_out.t"


@pytest.fixture(scope="module")
def store(spark, tmp_path_factory):
    """The module's Iceberg warehouse (its catalog current) with `lrt_src.orders` and `lrt_src.users`."""
    from sharp_dagster_tests.conftest import fresh_tables

    store = fresh_tables(spark, tmp_path_factory.mktemp("lrt_warehouse"))
    orders = spark.createDataFrame(
        [(1, 10, 5.0, "paid", ["a", "b"]), (2, 11, 7.5, "cancelled", ["c"]), (3, 10, 1.0, "paid", [])],
        "order_id INT, user_id INT, amount DOUBLE, status STRING, tags ARRAY<STRING>",
    )
    users = spark.createDataFrame([(10, "Oslo", 1), (11, "Rome", 2)], "user_id INT, city STRING, level INT")
    for name, df in (("orders", orders), ("users", users)):
        ref = TableRef("lrt_src", name)
        store.write_partition(ref, {"dt": "2024-01-01"}, df)
        store.register(ref)
    return store


@pytest.fixture(scope="module")
def tables(store):
    return store.spark


def check(spark, select: str):
    lineage = parse_script(select, dialect="spark", schema=SCHEMA, default_target=TARGET)
    observed = plan_lineage(analyzed_plan_json(spark.sql(select)))
    return compare(lineage, TARGET, observed, compare_dependencies=True), observed


STATEMENTS = {
    "join_group_window": """
        SELECT o.user_id, u.city, COUNT(DISTINCT o.order_id) AS orders, SUM(o.amount) AS total,
               DENSE_RANK() OVER (PARTITION BY u.city ORDER BY SUM(o.amount) DESC) AS city_rank,
               SUM(o.amount) / SUM(SUM(o.amount)) OVER () AS share
        FROM lrt_src.orders o LEFT JOIN lrt_src.users u ON u.user_id = o.user_id AND u.dt = '2024-01-01'
        WHERE o.dt = '2024-01-01' AND o.status <> 'cancelled'
        GROUP BY o.user_id, u.city""",
    "cte_twice_union": """
        WITH paid AS (SELECT order_id, user_id, amount FROM lrt_src.orders WHERE status = 'paid')
        SELECT user_id AS id, amount AS value FROM paid
        UNION ALL
        SELECT order_id, amount * 2 FROM paid""",
    "subqueries_case_coalesce": """
        SELECT o.order_id,
               CASE WHEN o.amount > 2 THEN o.status ELSE COALESCE(o.status, 'n/a') END AS label,
               (SELECT MAX(u.level) FROM lrt_src.users u) AS max_level
        FROM lrt_src.orders o
        WHERE o.user_id IN (SELECT user_id FROM lrt_src.users WHERE city = 'Oslo')""",
    "derived_table": """
        SELECT s.user_id, s.n * 10 AS n10
        FROM (SELECT user_id, COUNT(*) AS n, MAX(amount) AS top FROM lrt_src.orders GROUP BY user_id) s
        ORDER BY s.user_id""",
    "star_with_schema": "SELECT * FROM lrt_src.users WHERE dt = '2024-01-01'",
}


@pytest.mark.parametrize("name", sorted(STATEMENTS))
def test_parser_and_spark_agree(tables, name):
    comparison, observed = check(tables, STATEMENTS[name])
    assert comparison.passed, [d.message for d in comparison.differences]
    assert observed.tables and observed.columns and not observed.unknown_nodes


def test_spark_answers_are_spark_s(tables):
    """Spot checks that the plan side is read from the plan, not echoed from the parser."""
    _, observed = check(tables, STATEMENTS["join_group_window"])
    assert observed.tables == ["lrt_src.orders", "lrt_src.users"]
    assert observed.columns["city_rank"] == [] and observed.columns["share"] == ["lrt_src.orders.amount"]
    assert {"lrt_src.orders.status", "lrt_src.users.dt", "lrt_src.users.city"} <= set(observed.dependencies)
    _, observed = check(tables, STATEMENTS["cte_twice_union"])
    assert observed.columns == {
        "id": ["lrt_src.orders.order_id", "lrt_src.orders.user_id"],
        "value": ["lrt_src.orders.amount"],
    }
    _, observed = check(tables, STATEMENTS["subqueries_case_coalesce"])
    assert observed.columns["max_level"] == ["lrt_src.users.level"]
    assert observed.columns["label"] == ["lrt_src.orders.amount", "lrt_src.orders.status"]


def test_lateral_view_explode(tables):
    select = "SELECT o.order_id, tag FROM lrt_src.orders o LATERAL VIEW explode(o.tags) t AS tag"
    comparison, observed = check(tables, select)
    assert observed.columns["tag"] == ["lrt_src.orders.tags"]
    assert comparison.passed, [d.message for d in comparison.differences]


def test_temporary_view_hides_the_table(tables):
    tables.sql(
        "CREATE OR REPLACE TEMPORARY VIEW recent_paid AS SELECT order_id, amount AS amt FROM lrt_src.orders"
    )
    comparison, observed = check(tables, "SELECT order_id, amt FROM recent_paid")
    assert observed.tables == ["lrt_src.orders"] and observed.views == ["recent_paid"]
    assert not comparison.passed
    by_subject = {d.subject: d for d in comparison.differences}
    assert by_subject["default.recent_paid"].parsed == ["default.recent_paid"]
    assert by_subject["default.recent_paid"].spark == ["lrt_src.orders"]
    assert by_subject["lrt_out.t.amt"].parsed == ["default.recent_paid.amt"]
    assert by_subject["lrt_out.t.amt"].spark == ["lrt_src.orders.amount"]


def test_iceberg_relation_is_named_by_its_identifier_without_the_catalog(store):
    """The warehouse tables are DataSourceV2Relations of the Iceberg catalog (`sharp_<hash>` here): named
    `db.table` whether the SQL names the catalog or not, and whether read by SQL or by the DataFrame API."""
    spark = store.spark
    assert store.catalog.startswith("sharp") and spark.catalog.currentCatalog() == store.catalog
    plan = analyzed_plan_json(spark.sql("SELECT order_id FROM lrt_src.orders"))
    assert "DataSourceV2Relation" in plan and "LogicalRelation" not in plan  # the case this reader must name
    select = (
        f"SELECT o.order_id, o.amount * 2 AS a2 FROM {store.catalog}.lrt_src.orders o WHERE o.status = 'paid'"
    )
    observed = plan_lineage(analyzed_plan_json(spark.sql(select)))
    assert observed.tables == ["lrt_src.orders"]
    assert observed.columns == {"order_id": ["lrt_src.orders.order_id"], "a2": ["lrt_src.orders.amount"]}
    assert observed.dependencies == ["lrt_src.orders.status"]
    comparison, _ = check(spark, select)  # the parser's `sharp_<hash>.lrt_src.orders` is the same table
    assert comparison.passed, [d.message for d in comparison.differences]
    via_api = plan_lineage(analyzed_plan_json(spark.table(store.name(TableRef("lrt_src", "users")))))
    assert via_api.tables == ["lrt_src.users"] and via_api.columns["city"] == ["lrt_src.users.city"]


def test_branch_and_metadata_reads_are_reads_of_the_base_table(store):
    """A staged partition read from its branch (what the data-quality gate audits) and a metadata table read
    count as reads of the base table, by SQL (parser and Spark agree) and by `read_staged`."""
    spark = store.spark
    ref = TableRef("lrt_src", "orders")
    df = spark.createDataFrame(
        [(4, 12, 3.0, "paid", ["d"])],
        "order_id INT, user_id INT, amount DOUBLE, status STRING, tags ARRAY<STRING>",
    )
    staged = store.stage(ref, {"dt": "2024-01-02"}, df, token="lrt branch 1")
    try:
        select = (
            f"SELECT b.order_id, b.amount + 1 AS a1 FROM lrt_src.orders.branch_{staged.branch} b "
            "WHERE b.dt = '2024-01-02'"
        )
        comparison, observed = check(spark, select)
        assert observed.tables == ["lrt_src.orders"]
        assert observed.columns == {"order_id": ["lrt_src.orders.order_id"], "a1": ["lrt_src.orders.amount"]}
        assert comparison.passed, [d.message for d in comparison.differences]
        assert spark.sql(select).collect()[0].order_id == 4  # it really read the branch
        audited = plan_lineage(analyzed_plan_json(store.read_staged(staged)))
        assert audited.tables == ["lrt_src.orders"] and audited.dependencies == ["lrt_src.orders.dt"]
        snapshots = plan_lineage(
            analyzed_plan_json(spark.sql("SELECT snapshot_id FROM lrt_src.orders.snapshots"))
        )
        assert snapshots.tables == ["lrt_src.orders"]
        assert snapshots.columns == {"snapshot_id": ["lrt_src.orders.snapshot_id"]}
    finally:
        store.discard(staged)


def _create_tag(store, ref: TableRef, tag: str) -> None:
    """`ALTER TABLE <t> CREATE TAG `<tag>`` through the Iceberg table API that statement calls: the statement itself
    needs Iceberg's SQL extensions, static conf this session does not load (`spark.sql.extensions`)."""
    store.commit_refs(ref, lambda t: t.manageSnapshots().createTag(tag, t.currentSnapshot().snapshotId()))


def test_time_travel_to_a_tag_is_a_read_of_the_table(store):
    """Issue 33's DWD form, `FROM ods.x VERSION AS OF '${dt}' AS o` over a real tagged Iceberg table (and a read of
    the tag's snapshot id): Spark reads the tagged day, and its plan, the parser and the run-time lineage check of
    a SQL asset agree on the base table and its columns."""
    from pathlib import Path

    from sharp_dagster.assets.lineage_runtime import RuntimeLineageCheck
    from sharp_dagster.warehouse.catalog import SqlTable

    spark = store.spark
    ref, day = TableRef("lrt_src", "days"), "2024-01-03"
    rows = "order_id INT, amount DOUBLE, status STRING"
    store.write_partition(ref, {"dt": day}, spark.createDataFrame([(1, 5.0, "paid"), (2, 1.0, "open")], rows))
    store.register(ref)
    _create_tag(store, ref, day)
    store.write_partition(ref, {"dt": "2024-01-04"}, spark.createDataFrame([(3, 9.0, "paid")], rows))
    (tagged,) = spark.sql(f"SELECT snapshot_id FROM lrt_src.days.refs WHERE name = '{day}'").collect()
    sql = "SELECT o.order_id, o.amount * 2 AS a2 FROM lrt_src.days VERSION AS OF '${dt}' AS o WHERE o.status = 'paid'"
    by_id = f"SELECT d.order_id, d.amount AS a2 FROM lrt_src.days FOR SYSTEM_VERSION AS OF {tagged[0]} d "
    for select in (sql.replace("${dt}", day), by_id + "WHERE d.status = 'paid'"):
        comparison, observed = check(spark, select)
        assert observed.tables == ["lrt_src.days"] and observed.dependencies == ["lrt_src.days.status"]
        assert observed.columns == {"order_id": ["lrt_src.days.order_id"], "a2": ["lrt_src.days.amount"]}
        assert comparison.passed, [d.message for d in comparison.differences]
        assert [r.order_id for r in spark.sql(select).collect()] == [
            1
        ]  # the tagged day, not main's newer row
    table = SqlTable("lrt_out", "tagged_day", Path("lrt_out/tagged_day.sql"), sql, "", rendered=sql)
    rendered = table.render(day)
    outcome = RuntimeLineageCheck(table).observe(None, day, spark.sql(rendered), rendered)
    assert outcome["passed"] and not outcome.get("error") and outcome["differences"] == []
    assert outcome["spark"]["tables"] == outcome["parsed"]["tables"] == ["lrt_src.days"]
