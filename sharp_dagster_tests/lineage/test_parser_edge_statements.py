"""Statements off the happy path, as users paste them from real scripts: DDL without a query, LIKE / CLONE,
renames, partition exchange, VALUES with subqueries, temporary tables and views, and CTE name resolution.
Each in Spark SQL and in Hive or MySQL where the syntax exists there."""

from __future__ import annotations

import pytest

from .util import run

# ---- CREATE TABLE without a query ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dialect, ddl",
    [
        ("spark", "CREATE TABLE IF NOT EXISTS dwd.x (a INT, b STRING) USING parquet PARTITIONED BY (a)"),
        (
            "hive",
            "CREATE TABLE IF NOT EXISTS dwd.x (a INT, b STRING) PARTITIONED BY (dt STRING) STORED AS ORC",
        ),
        ("mysql", "CREATE TABLE IF NOT EXISTS dwd.x (a INT PRIMARY KEY, b VARCHAR(10)) ENGINE=InnoDB"),
    ],
)
def test_create_table_without_query_is_a_target_with_no_sources(dialect, ddl):
    r, cols = run(ddl, dialect)
    assert (r.sources, r.targets) == ([], ["dwd.x"])
    assert r.target_sources == {"dwd.x": []}
    expected = {"dwd.x.a": [], "dwd.x.b": []}
    if dialect == "hive":
        expected["dwd.x.dt"] = []
    assert cols == expected


@pytest.mark.parametrize("dialect", ["spark", "hive", "mysql"])
def test_ddl_target_then_insert_maps_into_its_columns(dialect):
    r, cols = run("CREATE TABLE dwd.x (k INT, v INT); INSERT INTO dwd.x SELECT a, b + 1 FROM ods.s", dialect)
    assert (r.sources, r.targets) == (["ods.s"], ["dwd.x"])
    assert cols == {"dwd.x.k": ["ods.s.a"], "dwd.x.v": ["ods.s.b"]}


@pytest.mark.parametrize("dialect", ["spark", "hive"])
def test_temporary_ddl_table_is_no_target(dialect):
    r, cols = run("CREATE TEMPORARY TABLE tmp_x (a INT)", dialect)
    assert (r.sources, r.targets, cols) == ([], [], {})


# ---- LIKE / CLONE ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dialect, sql",
    [
        ("spark", "CREATE TABLE IF NOT EXISTS dwd.x LIKE ods.s USING parquet"),
        ("hive", "CREATE TABLE dwd.x LIKE ods.s"),
        ("mysql", "CREATE TABLE dwd.x LIKE ods.s"),
        ("mysql", "CREATE TABLE dwd.x (LIKE ods.s)"),
        ("spark", "CREATE TABLE dwd.x SHALLOW CLONE ods.s"),
        ("spark", "CREATE OR REPLACE TABLE dwd.x DEEP CLONE ods.s"),
        ("spark", "CREATE TABLE IF NOT EXISTS dwd.x DEEP CLONE ods.s VERSION AS OF 3"),
        ("spark", "CREATE TABLE dwd.x SHALLOW CLONE ods.s TIMESTAMP AS OF '2024-06-01'"),
    ],
)
def test_like_and_clone_copy_same_name_columns(dialect, sql):
    schema = {"ods.s": {"id": "int", "v": "string"}}
    r, cols = run(sql, dialect, schema=schema)
    assert (r.sources, r.targets) == (["ods.s"], ["dwd.x"])
    assert cols == {"dwd.x.id": ["ods.s.id"], "dwd.x.v": ["ods.s.v"]}
    # Without a schema the columns are unknown: the whole-table star edge.
    r, cols = run(sql, dialect)
    assert (r.sources, r.targets, cols) == (["ods.s"], ["dwd.x"], {"dwd.x.*": ["ods.s.*"]})


@pytest.mark.parametrize("dialect", ["spark", "hive"])
def test_like_a_table_built_in_the_script_names_the_insert_columns(dialect):
    r, cols = run(
        "CREATE TABLE dwd.a (k INT, v INT); CREATE TABLE dwd.b LIKE dwd.a; INSERT INTO dwd.b SELECT x, y FROM ods.s",
        dialect,
    )
    assert r.targets == ["dwd.a", "dwd.b"] and r.target_sources["dwd.b"] == ["dwd.a", "ods.s"]
    assert cols["dwd.b.k"] == ["dwd.a.k", "ods.s.x"] and cols["dwd.b.v"] == ["dwd.a.v", "ods.s.y"]


def test_clone_of_a_temporary_view_passes_through_to_its_sources():
    r, cols = run(
        "CREATE TEMPORARY VIEW v AS SELECT id, amt * 2 AS a2 FROM ods.o WHERE ok; CREATE TABLE dwd.c SHALLOW CLONE v"
    )
    assert (r.sources, r.targets) == (["ods.o"], ["dwd.c"])
    assert cols == {"dwd.c.id": ["ods.o.id"], "dwd.c.a2": ["ods.o.amt"]}
    assert r.dataset_dependencies == ["ods.o.ok"]


# ---- ALTER TABLE ... RENAME TO ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dialect, sql",
    [
        ("spark", "ALTER TABLE ods.a RENAME TO ods.b"),
        ("spark", "ALTER VIEW ods.a RENAME TO ods.b"),
        ("hive", "ALTER TABLE ods.a RENAME TO ods.b"),
        ("mysql", "ALTER TABLE ods.a RENAME TO ods.b"),
        ("mysql", "RENAME TABLE ods.a TO ods.b"),
    ],
)
def test_rename_of_an_existing_table_is_a_dataset_edge(dialect, sql):
    r, cols = run(sql, dialect, schema={"ods.a": {"id": "int", "v": "int"}})
    assert (r.sources, r.targets, r.renames) == (["ods.a"], ["ods.b"], [("ods.a", "ods.b")])
    assert cols == {"ods.b.id": ["ods.a.id"], "ods.b.v": ["ods.a.v"]}


@pytest.mark.parametrize("dialect", ["spark", "hive", "mysql"])
def test_rename_of_a_staging_table_built_in_the_script_passes_its_lineage_on(dialect):
    r, cols = run(
        """
        DROP TABLE IF EXISTS dwd.t_staging;
        CREATE TABLE dwd.t_staging AS SELECT o.id, o.amt * 2 AS amt2 FROM ods.o o WHERE o.dt = '2024-06-01';
        DROP TABLE IF EXISTS dwd.t;
        ALTER TABLE dwd.t_staging RENAME TO dwd.t;
        """,
        dialect,
    )
    # The staging name no longer exists after the script: the final table has the real sources.
    assert (r.sources, r.targets) == (["ods.o"], ["dwd.t"])
    assert cols == {"dwd.t.id": ["ods.o.id"], "dwd.t.amt2": ["ods.o.amt"]}
    assert r.dataset_dependencies == ["ods.o.dt"]
    assert r.renames == [("dwd.t_staging", "dwd.t")]


def test_mysql_rename_table_swap_through_a_third_name():
    r, cols = run(
        "CREATE TABLE shop.t_new AS SELECT id, v FROM shop.src; "
        "RENAME TABLE shop.t TO shop.t_old, shop.t_new TO shop.t; DROP TABLE shop.t_old",
        "mysql",
    )
    # shop.t_old (the previous shop.t) is dropped; shop.t now holds what t_new was built from.
    assert (r.sources, r.targets) == (["shop.src", "shop.t"], ["shop.t"])
    assert cols == {"shop.t.id": ["shop.src.id"], "shop.t.v": ["shop.src.v"]}
    assert r.renames == [("shop.t", "shop.t_old"), ("shop.t_new", "shop.t")]


@pytest.mark.parametrize("dialect", ["spark", "hive"])
def test_rename_column_and_other_alter_actions_carry_no_lineage(dialect):
    r, cols = run(
        "ALTER TABLE dwd.t RENAME COLUMN a TO b; ALTER TABLE dwd.t SET TBLPROPERTIES ('k' = 'v')"
        if dialect == "spark"
        else "ALTER TABLE dwd.t SET TBLPROPERTIES ('k' = 'v'); ALTER TABLE dwd.t ADD COLUMNS (c INT)",
        dialect,
    )
    assert (r.sources, r.targets, cols, r.renames) == ([], [], {}, [])


# ---- ALTER TABLE ... EXCHANGE PARTITION ------------------------------------------------------------------------


@pytest.mark.parametrize("dialect", ["hive", "spark"])
def test_hive_exchange_partition_moves_rows_from_the_with_table(dialect):
    r, cols = run(
        "ALTER TABLE dwd.`orders` EXCHANGE PARTITION (dt='2024-06-01', hr='01') WITH TABLE stg.orders",
        dialect,
        schema={"stg.orders": {"id": "int", "amt": "double", "dt": "string"}},
    )
    assert (r.sources, r.targets) == (["stg.orders"], ["dwd.orders"])
    assert cols == {
        "dwd.orders.id": ["stg.orders.id"],
        "dwd.orders.amt": ["stg.orders.amt"],
        "dwd.orders.dt": ["stg.orders.dt"],
    }


def test_hive_exchange_from_a_staging_table_built_in_the_script():
    r, cols = run(
        """
        CREATE TABLE stg.o AS SELECT id, amt, dt FROM ods.o WHERE dt = '2024-06-01';
        ALTER TABLE dwd.o EXCHANGE PARTITION (dt='2024-06-01') WITH TABLE stg.o;
        DROP TABLE stg.o;
        """,
        "hive",
    )
    assert (r.sources, r.targets) == (["ods.o"], ["dwd.o"])
    assert cols == {"dwd.o.id": ["ods.o.id"], "dwd.o.amt": ["ods.o.amt"], "dwd.o.dt": ["ods.o.dt"]}
    assert r.dataset_dependencies == ["ods.o.dt"]


@pytest.mark.parametrize(
    "sql",
    [
        "ALTER TABLE pt EXCHANGE PARTITION p1 WITH TABLE nt",
        "ALTER TABLE pt EXCHANGE PARTITION p1 WITH TABLE nt WITHOUT VALIDATION",
    ],
)
def test_mysql_exchange_partition_swaps_rows_both_ways(sql):
    r, cols = run(sql, "mysql")
    assert (r.sources, r.targets) == (["nt", "pt"], ["nt", "pt"])
    assert r.target_sources == {"nt": ["pt"], "pt": ["nt"]}
    assert cols == {"pt.*": ["nt.*"], "nt.*": ["pt.*"]}


# ---- INSERT ... VALUES with subqueries -------------------------------------------------------------------------


@pytest.mark.parametrize("dialect", ["spark", "hive", "mysql"])
def test_insert_values_with_subqueries_reads_their_tables(dialect):
    r, cols = run(
        "INSERT INTO dwd.t (k, v) VALUES ((SELECT max(id) FROM ods.s WHERE ok = 1), 'x'), "
        "(0, (SELECT min(u.v) FROM ods.u u WHERE u.k = 2))",
        dialect,
    )
    assert (r.sources, r.targets) == (["ods.s", "ods.u"], ["dwd.t"])
    assert cols == {"dwd.t.k": ["ods.s.id"], "dwd.t.v": ["ods.u.v"]}
    assert r.dataset_dependencies == ["ods.s.ok", "ods.u.k"]


@pytest.mark.parametrize("dialect", ["spark", "hive"])
def test_insert_values_maps_by_position_to_known_columns_and_plain_values_read_nothing(dialect):
    r, cols = run(
        "INSERT INTO dwd.t VALUES (1, 'a', (SELECT count(1) FROM ods.s))",
        dialect,
        schema={"dwd.t": {"k": "int", "tag": "string", "n": "bigint"}},
    )
    assert r.sources == ["ods.s"]
    assert cols == {"dwd.t.k": [], "dwd.t.tag": [], "dwd.t.n": []}
    # Columns unknown and no column list: the table-level edge is still there.
    r, cols = run("INSERT INTO dwd.t VALUES (1, (SELECT max(v) FROM ods.s))", dialect)
    assert (r.sources, r.targets, cols) == (["ods.s"], ["dwd.t"], {})


def test_values_subquery_reading_a_temporary_view():
    r, cols = run(
        "CREATE TEMPORARY VIEW m AS SELECT max(id) AS top FROM ods.s; INSERT INTO dwd.t (k) VALUES ((SELECT top FROM m))"
    )
    assert (r.sources, r.targets, cols) == (["ods.s"], ["dwd.t"], {"dwd.t.k": ["ods.s.id"]})


# ---- temporary tables and views --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dialect, create, drop",
    [
        ("spark", "CREATE OR REPLACE TEMP VIEW v AS", ""),
        ("spark", "CACHE LAZY TABLE v AS", "UNCACHE TABLE IF EXISTS v;"),
        ("hive", "CREATE TEMPORARY TABLE v STORED AS ORC AS", "DROP TABLE IF EXISTS v;"),
        ("mysql", "CREATE TEMPORARY TABLE v", "DROP TEMPORARY TABLE IF EXISTS v;"),
        ("mysql", "CREATE TEMPORARY TABLE v AS", ""),
    ],
)
def test_temporary_tables_read_by_joins_subqueries_and_merge_pass_through(dialect, create, drop):
    sql = f"""
        {create} SELECT id, amt, city FROM ods.o WHERE dt = '2024-06-01';
        INSERT INTO dwd.a SELECT v.id, u.name FROM v JOIN ods.u u ON u.id = v.id;
        INSERT INTO dwd.b SELECT x.city, x.total FROM (SELECT city, sum(amt) AS total FROM v GROUP BY city) x;
        INSERT INTO dwd.c SELECT id FROM ods.p WHERE id IN (SELECT id FROM v);
        {drop}
    """
    r, cols = run(sql, dialect)
    assert r.sources == ["ods.o", "ods.p", "ods.u"]
    assert r.targets == ["dwd.a", "dwd.b", "dwd.c"]
    assert cols == {
        "dwd.a.id": ["ods.o.id"],
        "dwd.a.name": ["ods.u.name"],
        "dwd.b.city": ["ods.o.city"],
        "dwd.b.total": ["ods.o.amt"],
        "dwd.c.id": ["ods.p.id"],
    }
    assert r.target_sources == {"dwd.a": ["ods.o", "ods.u"], "dwd.b": ["ods.o"], "dwd.c": ["ods.o", "ods.p"]}
    assert r.target_dependencies["dwd.c"] == ["ods.o.dt", "ods.o.id", "ods.p.id"]


def test_spark_global_temporary_view_is_read_through_global_temp():
    r, cols = run(
        "CREATE GLOBAL TEMPORARY VIEW gv AS SELECT id, v FROM ods.s; "
        "INSERT INTO dwd.t SELECT g.id, g.v FROM global_temp.gv g; DROP VIEW global_temp.gv"
    )
    assert (r.sources, r.targets) == (["ods.s"], ["dwd.t"])
    assert cols == {"dwd.t.id": ["ods.s.id"], "dwd.t.v": ["ods.s.v"]}


@pytest.mark.parametrize("dialect", ["spark", "hive"])
def test_temporary_table_filled_by_insert_then_merged_from(dialect):
    create = "CREATE TEMPORARY VIEW" if dialect == "spark" else "CREATE TEMPORARY TABLE"
    sql = (
        f"{create} s AS SELECT id, v FROM ods.changes WHERE op <> 'd'; "
        "MERGE INTO dwd.t t USING s ON t.id = s.id WHEN MATCHED THEN UPDATE SET t.v = s.v "
        "WHEN NOT MATCHED THEN INSERT (id, v) VALUES (s.id, s.v)"
    )
    r, cols = run(sql, dialect)
    assert (r.sources, r.targets) == (["ods.changes"], ["dwd.t"])
    assert cols == {"dwd.t.v": ["ods.changes.v"], "dwd.t.id": ["ods.changes.id"]}
    assert r.dataset_dependencies == ["ods.changes.id", "ods.changes.op"]


@pytest.mark.parametrize("dialect", ["spark", "hive"])
def test_a_temporary_view_is_never_a_final_node(dialect):
    create = "CREATE TEMPORARY VIEW" if dialect == "spark" else "CREATE TEMPORARY TABLE"
    r, cols = run(f"{create} v1 AS SELECT a FROM ods.s; {create} v2 AS SELECT a FROM v1", dialect)
    assert (r.sources, r.targets, cols) == (["ods.s"], [], {})


def test_hive_temporary_ddl_table_filled_by_insert():
    r, cols = run(
        "CREATE TEMPORARY TABLE tmp (k STRING, n BIGINT); "
        "INSERT INTO tmp SELECT city, count(1) FROM ods.o GROUP BY city; "
        "INSERT OVERWRITE TABLE ads.c SELECT k, n FROM tmp WHERE n > 10",
        "hive",
    )
    assert (r.sources, r.targets) == (["ods.o"], ["ads.c"])
    assert cols == {"ads.c.k": ["ods.o.city"], "ads.c.n": []}
    assert r.dataset_dependencies == ["ods.o.city"]


# ---- CTE name resolution ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("dialect", ["spark", "hive", "mysql"])
def test_cte_shadowing_a_real_table_wins_inside_its_statement_only(dialect):
    r, cols = run(
        """
        WITH orders AS (SELECT id, amt FROM orders WHERE status = 'paid')
        INSERT INTO dwd.paid SELECT o.id, o.amt FROM orders o WHERE o.id IN (SELECT id FROM orders);
        INSERT INTO dwd.all_orders SELECT id, status FROM orders;
        """,
        dialect,
    )
    # Inside the CTE's own body `orders` is the real table (a CTE does not see itself), so is it after the
    # statement; everywhere else in the first statement it is the CTE.
    assert r.target_sources == {"dwd.all_orders": ["orders"], "dwd.paid": ["orders"]}
    assert cols == {
        "dwd.paid.id": ["orders.id"],
        "dwd.paid.amt": ["orders.amt"],
        "dwd.all_orders.id": ["orders.id"],
        "dwd.all_orders.status": ["orders.status"],
    }
    # The CTE's filter reaches dwd.paid; the second statement reads the whole real table.
    assert r.target_dependencies == {"dwd.paid": ["orders.id", "orders.status"], "dwd.all_orders": []}


@pytest.mark.parametrize("dialect", ["spark", "hive"])
def test_cte_shadowing_a_temporary_view_and_a_qualified_name_stays_real(dialect):
    r, cols = run(
        """
        CREATE TEMPORARY VIEW users AS SELECT id, name FROM ods.users_v1;
        WITH users AS (SELECT id, nick AS name FROM ods.users_v2)
        INSERT INTO dwd.a SELECT u.id, u.name, o.amt FROM users u JOIN ods.users o ON o.id = u.id;
        INSERT INTO dwd.b SELECT id, name FROM users;
        """,
        dialect,
    )
    assert cols == {
        "dwd.a.id": ["ods.users_v2.id"],
        "dwd.a.name": ["ods.users_v2.nick"],
        "dwd.a.amt": ["ods.users.amt"],
        "dwd.b.id": ["ods.users_v1.id"],
        "dwd.b.name": ["ods.users_v1.name"],
    }
    assert r.target_sources == {"dwd.a": ["ods.users", "ods.users_v2"], "dwd.b": ["ods.users_v1"]}


@pytest.mark.parametrize("dialect", ["spark", "hive"])
def test_inner_cte_shadows_outer_cte_only_in_its_subquery(dialect):
    _, cols = run(
        """
        WITH c AS (SELECT a FROM ods.outer_t)
        INSERT INTO dwd.t
        SELECT x.a, c.a AS b FROM (WITH c AS (SELECT a FROM ods.inner_t) SELECT a FROM c) x CROSS JOIN c
        """,
        dialect,
    )
    assert cols == {"dwd.t.a": ["ods.inner_t.a"], "dwd.t.b": ["ods.outer_t.a"]}


@pytest.mark.parametrize("dialect", ["spark", "hive", "mysql"])
def test_cte_defined_but_not_selected_from_is_no_source(dialect):
    r, cols = run(
        """
        WITH unused AS (SELECT * FROM ods.big WHERE (SELECT max(x) FROM ods.other) > 0),
             used_only_by_unused AS (SELECT a FROM ods.never),
             also_unused AS (SELECT a FROM used_only_by_unused),
             used AS (SELECT a, b FROM ods.s WHERE k = 1)
        INSERT INTO dwd.t SELECT a, b FROM used
        """,
        dialect,
    )
    assert (r.sources, r.targets) == (["ods.s"], ["dwd.t"])
    assert cols == {"dwd.t.a": ["ods.s.a"], "dwd.t.b": ["ods.s.b"]}
    assert r.dataset_dependencies == ["ods.s.k"]


def test_cte_used_only_in_a_where_subquery_is_a_source():
    r, cols = run(
        "WITH vip AS (SELECT uid FROM ods.vip WHERE lvl > 3) "
        "INSERT INTO dwd.t SELECT id FROM ods.u WHERE id IN (SELECT uid FROM vip)"
    )
    assert r.sources == ["ods.u", "ods.vip"] and cols == {"dwd.t.id": ["ods.u.id"]}
    assert r.dataset_dependencies == ["ods.u.id", "ods.vip.lvl", "ods.vip.uid"]


def test_spark_temporary_view_over_files_passes_through_to_the_path():
    r, cols = run(
        "CREATE TEMPORARY VIEW raw USING parquet OPTIONS (path '/landing/orders', mergeSchema 'true'); "
        "INSERT INTO ods.orders SELECT id, amt FROM raw"
    )
    # Named as Spark SQL names a path table: parquet.`/landing/orders`.
    assert (r.sources, r.targets) == (["parquet./landing/orders"], ["ods.orders"])
    assert cols == {
        "ods.orders.id": ["parquet./landing/orders.id"],
        "ods.orders.amt": ["parquet./landing/orders.amt"],
    }


def test_spark_insert_table_shorthand_reads_the_table():
    r, cols = run("INSERT INTO dwd.t TABLE ods.s", schema={"ods.s": {"a": "int", "b": "int"}})
    assert (r.sources, r.targets) == (["ods.s"], ["dwd.t"])
    assert cols == {"dwd.t.a": ["ods.s.a"], "dwd.t.b": ["ods.s.b"]}
