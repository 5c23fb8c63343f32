"""Spark's time-travel clause (`VERSION AS OF`, `TIMESTAMP AS OF` and their synonyms) reads the table itself: every
table, column, dependency and transformation comes out exactly as without the clause (issue 33: DWD SQL reads
`FROM ods.orders VERSION AS OF '${dt}' AS o`, the day's Iceberg tag)."""

from __future__ import annotations

import pytest

from sharp_dagster.lineage.parser import LineageParseError, ScriptLineage, parse_script
from sharp_dagster.warehouse.catalog_lineage import build_project_graph, project_lineage

from .conftest import make_catalog

SCHEMA = {
    "ods.orders": {"order_id": "bigint", "user_id": "bigint", "amount": "decimal", "status": "string"},
    "ods.users": {"user_id": "bigint", "city": "string"},
}

# Every spelling of Spark's `temporalClause` (SqlBaseParser.g4), in upper and lower case.
CLAUSES = [
    "VERSION AS OF '2024-01-03'",
    "VERSION AS OF '${dt}'",
    "VERSION AS OF 8744736658442914487",
    "FOR VERSION AS OF 3",
    "SYSTEM_VERSION AS OF 3",
    "FOR SYSTEM_VERSION AS OF '2024-01-03'",
    "TIMESTAMP AS OF '2024-01-03 00:00:00'",
    "TIMESTAMP AS OF current_timestamp() - INTERVAL 1 DAY",
    "FOR TIMESTAMP AS OF '2024-01-03'",
    "SYSTEM_TIME AS OF '2024-01-03 00:00:00'",
    "FOR SYSTEM_TIME AS OF date_sub(current_date(), 1)",
    "for system_version as of 3",
    "system_time as of '2024-01-03'",
]

# `{tt}` stands where the clause goes: after the table name, before its alias.
STATEMENTS = {
    "dwd_join": """
        INSERT OVERWRITE TABLE dwd.order_detail PARTITION (dt = '2024-01-03')
        SELECT o.order_id, o.amount * 2 AS amount2, u.city, CASE WHEN o.status = 'paid' THEN o.amount END AS paid
        FROM ods.orders {tt} AS o JOIN ods.users {tt} u ON u.user_id = o.user_id
        WHERE o.status <> 'cancelled'""",
    "star_unqualified_group": """
        INSERT OVERWRITE TABLE dwd.t SELECT user_id, SUM(amount) AS total FROM ods.orders {tt}
        WHERE amount > 0 GROUP BY user_id ORDER BY total""",
    "select_star": "INSERT OVERWRITE TABLE dwd.t SELECT * FROM ods.orders {tt} o",
    "cte_subquery": """
        WITH recent AS (SELECT order_id, user_id, amount FROM ods.orders {tt})
        INSERT OVERWRITE TABLE dwd.t
        SELECT r.order_id, (SELECT MAX(u.city) FROM ods.users {tt} u WHERE u.user_id = r.user_id) AS city
        FROM recent r WHERE r.user_id IN (SELECT user_id FROM ods.users {tt})""",
    "catalog_and_quotes": """
        INSERT OVERWRITE TABLE dwd.t SELECT o.order_id FROM sharp.`ods`.`orders` {tt} o
        LEFT JOIN `ods`.users {tt} ON users.user_id = o.user_id""",
    "no_schema_temp_view": """
        CREATE TEMPORARY VIEW v AS SELECT a, b FROM ods.raw {tt} WHERE c = 1;
        INSERT INTO dwd.t SELECT a + b AS s FROM v""",
    "merge_using": """
        MERGE INTO dwd.t t USING ods.orders {tt} s ON t.order_id = s.order_id
        WHEN MATCHED THEN UPDATE SET t.amount = s.amount
        WHEN NOT MATCHED THEN INSERT (order_id, amount) VALUES (s.order_id, s.amount)""",
}


def answer(r: ScriptLineage) -> dict:
    """Everything the parser answers about a script but its timing."""
    return {
        "sources": r.sources,
        "targets": r.targets,
        "columns": [(c.target, c.sources, c.refs, c.transformations) for c in r.columns],
        "dependencies": r.dataset_dependencies,
        "kinds": r.dependency_kinds,
        "target_sources": r.target_sources,
        "target_dependency_refs": r.target_dependency_refs,
        "unresolved": r.unresolved,
        "renames": r.renames,
        "paths": r.paths,
    }


@pytest.mark.parametrize("name", sorted(STATEMENTS))
@pytest.mark.parametrize("clause", CLAUSES)
def test_time_travel_changes_no_table_column_or_dependency(name, clause):
    template = STATEMENTS[name]
    plain = parse_script(template.replace(" {tt}", ""), schema=SCHEMA)
    travelled = parse_script(template.replace("{tt}", clause), schema=SCHEMA)
    assert answer(travelled) == answer(plain)
    assert plain.sources and plain.columns  # the statements do have lineage to keep


def test_the_dwd_form_of_issue_33():
    r = parse_script(
        "INSERT OVERWRITE TABLE dwd.order_detail SELECT o.order_id, o.amount FROM ods.orders "
        "VERSION AS OF '${dt}' AS o WHERE o.status = 'paid'",
        schema=SCHEMA,
    )
    assert r.sources == ["ods.orders"] and r.targets == ["dwd.order_detail"]
    assert {c.target: c.sources for c in r.columns} == {
        "dwd.order_detail.order_id": ["ods.orders.order_id"],
        "dwd.order_detail.amount": ["ods.orders.amount"],
    }
    assert r.dataset_dependencies == ["ods.orders.status"]


def test_names_like_the_clause_keep_their_meaning():
    """`system_time` / `system_version` as a table alias or column name (not followed by AS OF) are names."""
    r = parse_script(
        "INSERT INTO dwd.t SELECT system_time.system_version, system_time.x AS system_time "
        "FROM ods.orders system_time",
    )
    assert {c.target: c.sources for c in r.columns} == {
        "dwd.t.system_version": ["ods.orders.system_version"],
        "dwd.t.system_time": ["ods.orders.x"],
    }


def test_project_graph_of_tagged_reads_is_the_graph_of_plain_reads():
    """The catalog's lineage (asset deps, `SELECT *` expansion downstream) of a DWD table reading its ODS day
    as a tag equals that of the plain read."""
    plain = make_catalog()
    tagged = make_catalog(
        dwd__detail="SELECT *, amount * 2 AS double_amount FROM ods.orders VERSION AS OF '2024-01-01' "
        "WHERE amount > 0"
    )
    p, t = project_lineage(plain), project_lineage(tagged)
    assert list(p) == list(t)
    assert {k: answer(v) for k, v in p.items()} == {k: answer(v) for k, v in t.items()}
    g_plain, g_tagged = build_project_graph(plain), build_project_graph(tagged)
    assert g_tagged.edges() == g_plain.edges()
    assert g_tagged.column_impact("ods.orders", "amount") == g_plain.column_impact("ods.orders", "amount")
    assert ("dwd.detail", "double_amount") in g_tagged.column_impact("ods.orders", "amount")


@pytest.mark.parametrize(
    ("clause", "message"),
    [
        (
            "VERSION AS OF o",
            "time travel of ods.orders: a version is a snapshot id or a tag or branch name, not `o`",
        ),
        (
            "TIMESTAMP AS OF o.ts",
            "time travel of ods.orders: a timestamp is a constant expression, not `o.ts`",
        ),
        (
            "VERSION AS OF",
            "time travel of ods.orders: `AS OF` names no version (a snapshot id or a tag or branch name)",
        ),
        ("FOR SYSTEM_TIME AS OF", "time travel of ods.orders: `AS OF` names no timestamp"),
        (
            "FOR VERSION FROM 1 TO 3",
            "time travel of ods.orders: Spark travels to one version (`AS OF`), not `FROM`",
        ),
        (
            "FOR SYSTEM_TIME BETWEEN '2024-01-01' AND '2024-01-02'",
            "time travel of ods.orders: Spark travels to one timestamp (`AS OF`), not `BETWEEN`",
        ),
    ],
)
def test_a_clause_spark_refuses_is_a_one_line_error_at_its_table(clause, message):
    with pytest.raises(LineageParseError) as err:
        parse_script(
            f"INSERT INTO dwd.t SELECT a FROM x;\nINSERT INTO dwd.t SELECT a\n  FROM ods.orders {clause}"
        )
    assert (err.value.message, err.value.line, err.value.col) == (message, 3, 8)
    assert str(err.value) == f"line 3, column 8: {message}"
