"""Statement shapes: parenthesised relations, CTE shapes, wildcards over known schemas, unresolved columns,
expressions, unions whose later branch has more columns, lateral column aliases, and path datasets."""

from __future__ import annotations

import pytest

from .util import run

# ---- parenthesised relations ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "frm",
    [
        "(tab1)",
        "((tab1))",
        "(tab1 AS a)",
        "((tab1 AS a))",
        "(((tab1 a)))",
    ],
)
def test_parenthesised_table_is_the_table(frm):
    qual = "a." if " a" in frm else ""
    r, cols = run(f"INSERT INTO tab2 SELECT {qual}col1, {qual}col2 + 1 AS c FROM {frm} WHERE {qual}k > 0")
    assert (r.sources, r.targets) == (["tab1"], ["tab2"])
    assert cols == {"tab2.col1": ["tab1.col1"], "tab2.c": ["tab1.col2"]}
    assert r.dataset_dependencies == ["tab1.k"]


def test_join_written_inside_parentheses():
    r, cols = run("INSERT INTO tab2 SELECT a.col1, b.col2 FROM (tab1 a JOIN tab3 b ON a.id = b.id)")
    assert r.sources == ["tab1", "tab3"]
    assert cols == {"tab2.col1": ["tab1.col1"], "tab2.col2": ["tab3.col2"]}
    assert r.dataset_dependencies == ["tab1.id", "tab3.id"]


def test_parenthesised_join_joined_again():
    r, cols = run(
        "INSERT INTO tab2 SELECT a.x, b.y, c.z FROM ((tab1 a JOIN tab3 b ON a.id = b.id)) "
        "LEFT JOIN tab4 c ON c.id = a.id"
    )
    assert r.sources == ["tab1", "tab3", "tab4"]
    assert cols == {"tab2.x": ["tab1.x"], "tab2.y": ["tab3.y"], "tab2.z": ["tab4.z"]}
    assert r.dataset_dependencies == ["tab1.id", "tab3.id", "tab4.id"]


def test_aliased_parenthesised_table():
    r, cols = run("INSERT INTO tab2 SELECT t.col1 FROM (tab1) AS t WHERE t.k = 1")
    assert r.sources == ["tab1"] and cols == {"tab2.col1": ["tab1.col1"]}
    assert r.dataset_dependencies == ["tab1.k"]


def test_aliased_parenthesised_join_over_known_schemas():
    schema = {"tab1": {"id": "int", "a": "int"}, "tab3": {"id": "int", "b": "int"}}
    r, cols = run(
        "INSERT INTO tab2 SELECT x.a, x.b FROM (tab1 JOIN tab3 ON tab1.id = tab3.id) AS x", schema=schema
    )
    assert r.sources == ["tab1", "tab3"]
    assert cols == {"tab2.a": ["tab1.a"], "tab2.b": ["tab3.b"]}
    assert r.dataset_dependencies == ["tab1.id", "tab3.id"]


@pytest.mark.parametrize(
    "sql",
    [
        "CREATE TABLE tab2 AS (SELECT col1, col2 AS c FROM tab1)",
        "CREATE TABLE tab2 AS ((SELECT col1, col2 AS c FROM tab1))",
        "CREATE TABLE tab2 USING parquet AS (SELECT col1, col2 AS c FROM (tab1))",
        "INSERT INTO tab2 (SELECT col1, col2 AS c FROM tab1)",
    ],
)
def test_query_in_parentheses_after_as(sql):
    r, cols = run(sql)
    assert (r.sources, r.targets) == (["tab1"], ["tab2"])
    assert cols == {"tab2.col1": ["tab1.col1"], "tab2.c": ["tab1.col2"]}


# ---- CTE shapes -------------------------------------------------------------------------------------------------


def test_cte_named_like_the_real_table_it_reads():
    r, cols = run("WITH tab1 AS (SELECT col1 FROM tab1 WHERE ok) INSERT INTO tab2 SELECT col1 FROM tab1")
    assert (r.sources, r.targets) == (["tab1"], ["tab2"])
    assert cols == {"tab2.col1": ["tab1.col1"]}
    assert r.dataset_dependencies == ["tab1.ok"]


def test_cte_named_like_a_real_table_of_another_database():
    r, cols = run("WITH orders AS (SELECT id FROM db.orders) INSERT INTO tab2 SELECT o.id FROM orders o")
    assert r.sources == ["db.orders"] and cols == {"tab2.id": ["db.orders.id"]}


def test_cte_in_update_from():
    r, cols = run(
        "WITH c AS (SELECT id, v * 2 AS v FROM tab1 WHERE k = 1) UPDATE tab2 SET w = c.v FROM c WHERE tab2.id = c.id"
    )
    assert (r.sources, r.targets) == (["tab1"], ["tab2"])
    assert cols == {"tab2.w": ["tab1.v"]}
    assert r.dataset_dependencies == ["tab1.id", "tab1.k"]


def test_union_whose_second_branch_does_not_read_the_cte():
    r, cols = run(
        "WITH c AS (SELECT col1 FROM tab1) INSERT INTO tab2 SELECT col1 FROM c UNION ALL SELECT col1 FROM tab3"
    )
    assert r.sources == ["tab1", "tab3"]
    assert cols == {"tab2.col1": ["tab1.col1", "tab3.col1"]}


def test_union_whose_first_branch_does_not_read_the_cte():
    r, cols = run(
        "WITH c AS (SELECT x AS col1 FROM tab1) INSERT INTO tab2 SELECT col1 FROM tab3 UNION SELECT col1 FROM c"
    )
    assert r.sources == ["tab1", "tab3"]
    assert cols == {"tab2.col1": ["tab1.x", "tab3.col1"]}


def test_unused_cte_is_no_source():
    r, cols = run("WITH c AS (SELECT x FROM tab9) INSERT INTO tab2 SELECT col1 FROM tab1")
    assert r.sources == ["tab1"] and cols == {"tab2.col1": ["tab1.col1"]}


def test_nested_ctes_with_partial_wildcard():
    r, cols = run(
        "WITH a AS (SELECT id, x FROM tab1), b AS (SELECT id, y FROM tab3), "
        "ab AS (SELECT a.*, b.y FROM a JOIN b ON a.id = b.id) "
        "INSERT INTO tab2 SELECT ab.* FROM ab"
    )
    assert cols == {"tab2.id": ["tab1.id"], "tab2.x": ["tab1.x"], "tab2.y": ["tab3.y"]}
    assert r.dataset_dependencies == ["tab1.id", "tab3.id"]


def test_cte_inside_a_cte_body():
    _, cols = run(
        "WITH outer_c AS (WITH inner_c AS (SELECT v FROM tab1) SELECT v + 1 AS w FROM inner_c) "
        "INSERT INTO tab2 SELECT w FROM outer_c"
    )
    assert cols == {"tab2.w": ["tab1.v"]}


# ---- wildcards and unresolved columns ---------------------------------------------------------------------------


def test_qualified_wildcard_over_a_known_schema_expands_to_its_columns():
    schema = {"tab1": {"a": "int", "b": "int"}, "tab3": {"a": "int", "c": "int"}}
    r, cols = run("INSERT INTO tab2 SELECT t.*, u.c FROM tab1 t JOIN tab3 u ON t.a = u.a", schema=schema)
    assert cols == {"tab2.a": ["tab1.a"], "tab2.b": ["tab1.b"], "tab2.c": ["tab3.c"]}
    assert r.dataset_dependencies == ["tab1.a", "tab3.a"]


def test_qualified_wildcard_maps_by_position_into_a_known_target():
    schema = {"tab1": {"a": "int", "b": "int"}, "tab2": {"x": "int", "y": "int", "z": "int"}}
    _, cols = run("INSERT INTO tab2 SELECT t.*, 1 FROM tab1 t", schema=schema)
    assert cols == {"tab2.x": ["tab1.a"], "tab2.y": ["tab1.b"], "tab2.z": []}


def test_qualified_wildcard_over_an_unknown_schema_stays_a_wildcard():
    _, cols = run("INSERT INTO tab2 SELECT t.* FROM tab1 t JOIN tab3 u ON t.id = u.id")
    assert cols == {"tab2.*": ["tab1.*"]}


def test_unqualified_column_of_two_schemaless_tables_is_unresolved():
    r, cols = run("INSERT INTO tab2 SELECT col1, a.col2 FROM tab1 a JOIN tab3 b ON a.id = b.id")
    assert cols == {"tab2.col1": [], "tab2.col2": ["tab1.col2"]}
    assert r.unresolved == ["col1"]
    assert r.sources == ["tab1", "tab3"]


def test_unqualified_column_resolves_when_one_side_has_a_schema_without_it():
    schema = {"tab1": {"id": "int"}}
    r, cols = run("INSERT INTO tab2 SELECT col1 FROM tab1 a JOIN tab3 b ON a.id = b.id", schema=schema)
    assert cols == {"tab2.col1": ["tab3.col1"]} and r.unresolved == []


def test_unqualified_column_in_where_of_a_schemaless_join_is_unresolved():
    r, cols = run("INSERT INTO tab2 SELECT a.x FROM tab1 a, tab3 b WHERE flag = 1")
    assert cols == {"tab2.x": ["tab1.x"]}
    assert r.dataset_dependencies == [] and r.unresolved == ["flag"]


@pytest.mark.parametrize(
    ("join", "sources"),
    [
        ("JOIN", ["tab1.id"]),
        ("LEFT JOIN", ["tab1.id"]),
        ("RIGHT JOIN", ["tab3.id"]),
        ("FULL OUTER JOIN", ["tab1.id", "tab3.id"]),
    ],
)
def test_using_column_of_schemaless_tables_is_one_column(join, sources):
    r, cols = run(f"INSERT INTO tab2 SELECT id, a.v FROM tab1 a {join} tab3 b USING (id)")
    assert cols == {"tab2.id": sources, "tab2.v": ["tab1.v"]}
    assert r.unresolved == [] and r.dataset_dependencies == ["tab1.id", "tab3.id"]


def test_single_schemaless_table_needs_no_guess():
    r, cols = run("INSERT INTO tab2 SELECT col1 FROM tab1")
    assert cols == {"tab2.col1": ["tab1.col1"]} and r.unresolved == []


# ---- expressions ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "sources"),
    [
        ("concat(upper(a), lower(b), 'x')", ["tab1.a", "tab1.b"]),
        ("nvl(a, coalesce(b, c))", ["tab1.a", "tab1.b", "tab1.c"]),
        ("CAST(a + b AS DECIMAL(10, 2))", ["tab1.a", "tab1.b"]),
        ("CASE a WHEN 1 THEN b WHEN 2 THEN c END", ["tab1.a", "tab1.b", "tab1.c"]),
        ("CASE WHEN a > 0 THEN CAST(b AS STRING) ELSE 'n' END", ["tab1.a", "tab1.b"]),
        ("((a * (b - c)))", ["tab1.a", "tab1.b", "tab1.c"]),
        ("date_format(to_date(a), 'yyyy') || b", ["tab1.a", "tab1.b"]),
        ("sum(a) OVER (PARTITION BY b ORDER BY c)", ["tab1.a"]),
    ],
)
def test_columns_inside_expressions(expr, sources):
    _, cols = run(f"INSERT INTO tab2 SELECT {expr} AS v FROM tab1")
    assert cols == {"tab2.v": sources}


def test_window_partition_and_order_columns_are_dependencies_not_sources():
    r, cols = run(
        "INSERT INTO tab2 SELECT id, lag(v) OVER (PARTITION BY g ORDER BY ts) AS prev, "
        "rank() OVER (PARTITION BY g2 ORDER BY v2 DESC) AS rk FROM tab1"
    )
    assert cols == {"tab2.id": ["tab1.id"], "tab2.prev": ["tab1.v"], "tab2.rk": []}
    assert r.dataset_dependencies == ["tab1.g", "tab1.g2", "tab1.ts", "tab1.v2"]
    assert r.dependency_kinds == {d: ["WINDOW"] for d in r.dataset_dependencies}


def test_union_whose_later_branch_has_more_columns():
    r, cols = run("INSERT INTO tab2 SELECT col1 FROM tab1 UNION ALL SELECT col1, col2 FROM tab3")
    assert cols == {"tab2.col1": ["tab1.col1", "tab3.col1"], "tab2.col2": ["tab3.col2"]}
    assert r.sources == ["tab1", "tab3"]


def test_three_branch_union_growing_twice():
    _, cols = run(
        "INSERT INTO tab2 SELECT a FROM t1 UNION ALL SELECT a, b FROM t2 UNION ALL SELECT a, b, c FROM t3"
    )
    assert cols == {
        "tab2.a": ["t1.a", "t2.a", "t3.a"],
        "tab2.b": ["t2.b", "t3.b"],
        "tab2.c": ["t3.c"],
    }


def test_union_maps_later_branches_by_position_not_name():
    _, cols = run("INSERT INTO tab2 SELECT a AS x, b AS y FROM t1 UNION SELECT q, p FROM t2")
    assert cols == {"tab2.x": ["t1.a", "t2.q"], "tab2.y": ["t1.b", "t2.p"]}


def test_lateral_column_alias_inside_a_subquery():
    _, cols = run("INSERT INTO tab2 SELECT s.b FROM (SELECT col1 + 1 AS a, a * 2 AS b FROM tab1) s")
    assert cols == {"tab2.b": ["tab1.col1"]}


def test_lateral_column_alias_chain():
    _, cols = run(
        "INSERT INTO tab2 SELECT c FROM (SELECT x AS a, a + y AS b, b * z AS c FROM tab1) s",
    )
    assert cols == {"tab2.c": ["tab1.x", "tab1.y", "tab1.z"]}


def test_lateral_column_alias_loses_to_a_real_column_of_a_known_schema():
    schema = {"tab1": {"a": "int", "x": "int"}}
    _, cols = run("INSERT INTO tab2 SELECT x + 1 AS a, a * 2 AS b FROM tab1", schema=schema)
    assert cols == {"tab2.a": ["tab1.x"], "tab2.b": ["tab1.a"]}


# ---- path datasets ----------------------------------------------------------------------------------------------


def test_path_relation_is_a_path_dataset():
    r, cols = run("INSERT INTO tab2 SELECT id, v FROM parquet.`/landing/Orders-2024`")
    assert r.sources == ["parquet./landing/Orders-2024"]
    assert r.paths == {"parquet./landing/Orders-2024": "/landing/Orders-2024"}
    assert cols == {
        "tab2.id": ["parquet./landing/Orders-2024.id"],
        "tab2.v": ["parquet./landing/Orders-2024.v"],
    }


def test_path_relation_with_a_scheme_joined_to_a_table():
    r, cols = run(
        "INSERT INTO tab2 SELECT f.id, t.name FROM json.`s3a://bucket/raw/x` f JOIN tab1 t ON t.id = f.id"
    )
    assert r.sources == ["json.s3a://bucket/raw/x", "tab1"]
    assert r.paths == {"json.s3a://bucket/raw/x": "s3a://bucket/raw/x"}
    assert cols == {"tab2.id": ["json.s3a://bucket/raw/x.id"], "tab2.name": ["tab1.name"]}


def test_table_in_a_database_named_like_a_format_is_a_table():
    r, _ = run("INSERT INTO tab2 SELECT id FROM parquet.events")
    assert r.sources == ["parquet.events"] and r.paths == {}


@pytest.mark.parametrize(
    ("head", "name", "location"),
    [
        ("INSERT OVERWRITE DIRECTORY '/out/x' USING parquet", "parquet./out/x", "/out/x"),
        (
            "INSERT OVERWRITE DIRECTORY USING csv OPTIONS (path '/out/y', header 'true')",
            "csv./out/y",
            "/out/y",
        ),
        ("INSERT OVERWRITE LOCAL DIRECTORY '/tmp/Out' STORED AS ORC", "orc./tmp/Out", "/tmp/Out"),
        ("INSERT OVERWRITE DIRECTORY 'hdfs://nn/out/z'", "text.hdfs://nn/out/z", "hdfs://nn/out/z"),
        (
            "INSERT OVERWRITE DIRECTORY '/out/w'\n  USING json\n  OPTIONS (compression 'gzip')",
            "json./out/w",
            "/out/w",
        ),
    ],
)
def test_insert_overwrite_directory_writes_a_path_dataset(head, name, location):
    r, cols = run(f"{head} SELECT a.id, a.v * 2 AS w FROM tab1 a WHERE a.k > 0")
    assert (r.sources, r.targets) == (["tab1"], [name])
    assert r.paths == {name: location}
    assert cols == {f"{name}.id": ["tab1.id"], f"{name}.w": ["tab1.v"]}
    assert r.dataset_dependencies == ["tab1.k"]


def test_directory_rewrite_keeps_error_lines_of_later_statements():
    from sharp_dagster.lineage.parser import LineageParseError, parse_script

    with pytest.raises(LineageParseError) as err:
        parse_script("INSERT OVERWRITE DIRECTORY '/o'\nUSING\nparquet SELECT a FROM t;\nSELECT FROM WHERE")
    assert err.value.line == 4


def test_nested_ctes_with_partial_wildcard_over_known_schemas():
    schema = {"tab1": {"id": "int", "x": "int", "z": "int"}, "tab3": {"id": "int", "y": "int"}}
    r, cols = run(
        "WITH a AS (SELECT * FROM tab1 WHERE z > 0), b AS (SELECT id, y FROM tab3) "
        "INSERT INTO tab2 SELECT a.*, b.y FROM a JOIN b ON a.id = b.id",
        schema=schema,
    )
    assert cols == {
        "tab2.id": ["tab1.id"],
        "tab2.x": ["tab1.x"],
        "tab2.z": ["tab1.z"],
        "tab2.y": ["tab3.y"],
    }
    assert r.dataset_dependencies == ["tab1.id", "tab1.z", "tab3.id"]


def test_parenthesised_aliased_tables_joined_outside_the_parentheses():
    r, cols = run("INSERT INTO tab2 SELECT A.x, b.y FROM ((tab1 AS a)) JOIN (tab3 B) ON a.id = B.id")
    assert r.sources == ["tab1", "tab3"]
    assert cols == {"tab2.x": ["tab1.x"], "tab2.y": ["tab3.y"]}
    assert r.dependency_kinds == {"tab1.id": ["JOIN"], "tab3.id": ["JOIN"]}
