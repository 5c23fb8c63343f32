"""Identifiers resolved as Spark resolves them: case-insensitive by default (aliases, CTE names, subquery aliases,
column qualifiers, schemas), case-sensitive under `spark.sql.caseSensitive` (parameter or SET in the script), and
the names Spark gives select-list expressions written without an alias."""

from __future__ import annotations

import pytest

from .util import run

# ---- case-insensitive by default --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        # a table alias written in another case than its definition
        ("INSERT INTO tab2 SELECT t.col1 FROM tab1 AS T", {"tab2.col1": ["tab1.col1"]}),
        ("INSERT INTO tab2 SELECT T.col1 FROM tab1 AS t", {"tab2.col1": ["tab1.col1"]}),
        # a CTE defined as Cte1 and read as cte1, its columns qualified as CTE1
        (
            "WITH Cte1 AS (SELECT col1 FROM tab1) INSERT INTO tab2 SELECT CTE1.col1 FROM cte1",
            {"tab2.col1": ["tab1.col1"]},
        ),
        # a subquery alias in upper case, its column in mixed case
        ("INSERT INTO tab2 SELECT sq.Col1 FROM (SELECT COL1 FROM tab1) SQ", {"tab2.col1": ["tab1.col1"]}),
        # the table name itself as the qualifier, in another case
        ("INSERT INTO tab2 SELECT TAB1.col1 FROM tab1", {"tab2.col1": ["tab1.col1"]}),
        # database and table name as the qualifier
        ("INSERT INTO tab2 SELECT Db.Tab1.col1 FROM db.tab1", {"tab2.col1": ["db.tab1.col1"]}),
        # a derived table's column list in another case than the outer reference
        (
            "INSERT INTO tab2 SELECT S.X FROM (SELECT col1 FROM tab1) AS s(x)",
            {"tab2.x": ["tab1.col1"]},
        ),
    ],
)
def test_qualifiers_and_names_match_whatever_their_case(sql, expected):
    r, cols = run(sql)
    assert cols == expected
    assert r.unresolved == []


def test_join_aliases_differing_in_case_keep_columns_apart():
    r, cols = run(
        "INSERT INTO tab3 SELECT A.x, b.Y FROM tab1 a JOIN tab2 B ON A.id = b.ID",
    )
    assert cols == {"tab3.x": ["tab1.x"], "tab3.y": ["tab2.y"]}
    assert r.dataset_dependencies == ["tab1.id", "tab2.id"]


def test_schema_columns_match_case_insensitively_for_wildcards_and_qualifiers():
    schema = {"DB.Orders": {"ID": "int", "Amount": "double"}, "db.users": {"id": "int", "City": "string"}}
    r, cols = run(
        "INSERT INTO dwd.t SELECT O.*, u.CITY FROM db.orders o JOIN db.USERS U ON o.id = u.Id",
        schema=schema,
    )
    assert cols == {
        "dwd.t.id": ["db.orders.id"],
        "dwd.t.amount": ["db.orders.amount"],
        "dwd.t.city": ["db.users.city"],
    }
    assert r.sources == ["db.orders", "db.users"]


def test_nested_cte_names_in_three_cases_are_one_cte():
    _, cols = run(
        "WITH Base AS (SELECT id, v FROM tab1), STEP AS (SELECT BASE.id, base.V * 2 AS w FROM base) "
        "INSERT INTO tab2 SELECT step.ID, Step.W FROM Step"
    )
    assert cols == {"tab2.id": ["tab1.id"], "tab2.w": ["tab1.v"]}


def test_group_by_and_order_by_aliases_in_another_case():
    r, cols = run("INSERT INTO tab2 SELECT k AS Key, sum(v) AS Total FROM tab1 GROUP BY KEY ORDER BY total")
    assert cols == {"tab2.key": ["tab1.k"], "tab2.total": ["tab1.v"]}
    assert r.dataset_dependencies == ["tab1.k", "tab1.v"]


# ---- spark.sql.caseSensitive ------------------------------------------------------------------------------------


def test_case_sensitive_keeps_column_names_as_written_and_tables_lower_case():
    r, cols = run("INSERT INTO DB.Tab2 SELECT Col1, col2 FROM Db.TAB1", case_sensitive=True)
    # Table names stay case-insensitive (the session catalog lower-cases them); columns do not.
    assert (r.sources, r.targets) == (["db.tab1"], ["db.tab2"])
    assert cols == {"db.tab2.Col1": ["db.tab1.Col1"], "db.tab2.col2": ["db.tab1.col2"]}


def test_case_sensitive_cte_name_in_another_case_is_a_table():
    sql = "WITH Cte1 AS (SELECT col1 FROM tab1) INSERT INTO tab2 SELECT col1 FROM cte1"
    r, cols = run(sql, case_sensitive=True)
    assert r.sources == ["cte1"] and cols == {"tab2.col1": ["cte1.col1"]}
    r, cols = run(sql)  # the default: the CTE
    assert r.sources == ["tab1"] and cols == {"tab2.col1": ["tab1.col1"]}
    # Written in the same case, it is the CTE under case sensitivity too.
    r, cols = run(sql.replace("FROM cte1", "FROM Cte1"), case_sensitive=True)
    assert r.sources == ["tab1"] and cols == {"tab2.col1": ["tab1.col1"]}


def test_case_sensitive_schema_names_only_match_exactly():
    schema = {"tab1": {"Id": "int", "id": "int"}}
    _, cols = run("INSERT INTO tab2 SELECT t.* FROM tab1 t", schema=schema, case_sensitive=True)
    assert cols == {"tab2.Id": ["tab1.Id"], "tab2.id": ["tab1.id"]}


def test_case_sensitive_alias_in_another_case_is_not_the_alias():
    # Under case sensitivity `S.v` does not name the subquery `s`: no lineage is invented through it.
    _, cols = run(
        "INSERT INTO tab2 SELECT s.v AS a, S.v AS b FROM (SELECT x AS v FROM tab1) s", case_sensitive=True
    )
    assert cols == {"tab2.a": ["tab1.x"], "tab2.b": []}


def test_set_statement_switches_case_sensitivity_for_the_statements_after_it():
    r, _ = run(
        "WITH C AS (SELECT a FROM t1) INSERT INTO o1 SELECT a FROM c;"
        "SET spark.sql.caseSensitive=true;"
        "WITH C AS (SELECT a FROM t2) INSERT INTO o2 SELECT a FROM c;"
        "SET spark.sql.caseSensitive = false;"
        "WITH C AS (SELECT a FROM t3) INSERT INTO o3 SELECT a FROM c"
    )
    assert r.target_sources == {"o1": ["t1"], "o2": ["c"], "o3": ["t3"]}


def test_hive_is_case_insensitive_and_mysql_keeps_case():
    _, cols = run("INSERT INTO tab2 SELECT T.Col1 FROM tab1 t", "hive")
    assert cols == {"tab2.col1": ["tab1.col1"]}
    _, cols = run("INSERT INTO tab2 SELECT t.Col1 FROM tab1 t", "mysql")
    assert cols == {"tab2.Col1": ["tab1.Col1"]}


# ---- Spark's names of unaliased expressions ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "name", "sources"),
    [
        ("max(col1)", "max(col1)", ["tab1.col1"]),
        ("MAX(T.col1)", "max(col1)", ["tab1.col1"]),
        ("count(*)", "count(1)", []),
        ("count(DISTINCT col2)", "count(distinct col2)", ["tab1.col2"]),
        ("(col1 + col2)", "(col1 + col2)", ["tab1.col1", "tab1.col2"]),
        ("col1 * 2 - 1", "((col1 * 2) - 1)", ["tab1.col1"]),
        ("CAST(col1 AS INT)", "col1", ["tab1.col1"]),
        ("coalesce(name, 'x')", "coalesce(name, x)", ["tab1.name"]),
        ("upper(t.name)", "upper(name)", ["tab1.name"]),
        ("-col1", "(- col1)", ["tab1.col1"]),
        (
            "CASE WHEN col1 > 0 THEN col2 ELSE col3 END",
            "case when (col1 > 0) then col2 else col3 end",
            ["tab1.col1", "tab1.col2", "tab1.col3"],
        ),
        ("IF(col1 > 1, col2, col3)", "(if((col1 > 1), col2, col3))", ["tab1.col1", "tab1.col2", "tab1.col3"]),
        ("col1 IS NULL", "(col1 is null)", ["tab1.col1"]),
        ("round(col1 / 3, 2)", "round((col1 / 3), 2)", ["tab1.col1"]),
        ("'lit'", "lit", []),
        ("(col1)", "col1", ["tab1.col1"]),
    ],
)
def test_unaliased_expression_is_named_as_spark_names_it(expr, name, sources):
    # The names checked against Spark 4's DataFrame columns for the same SELECT (lower-cased: Spark resolves
    # them case-insensitively).
    _, cols = run(f"INSERT INTO tab2 SELECT {expr} FROM tab1 t")
    assert cols == {f"tab2.{name}": sources}


def test_unaliased_window_function_is_named_with_its_default_frame():
    r, cols = run("INSERT INTO tab2 SELECT row_number() OVER (PARTITION BY col1 ORDER BY col2) FROM tab1")
    name = (
        "row_number() over (partition by col1 order by col2 asc nulls first "
        "rows between unbounded preceding and current row)"
    )
    assert cols == {f"tab2.{name}": []}
    assert r.dataset_dependencies == ["tab1.col1", "tab1.col2"]
