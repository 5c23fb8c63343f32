"""One test per statement kind, at table and column level, in Spark SQL and Hive SQL."""

from __future__ import annotations

import pytest

from .util import run

DIALECTS = ["spark", "hive"]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_insert_select_with_aliases_and_expressions(dialect):
    r, cols = run(
        "INSERT INTO TABLE dwd.t SELECT o.id AS order_id, o.amt * o.qty AS total, 'x' AS tag, upper(o.city) "
        "AS city FROM ods.orders o",
        dialect,
    )
    assert r.sources == ["ods.orders"] and r.targets == ["dwd.t"]
    assert cols == {
        "dwd.t.order_id": ["ods.orders.id"],
        "dwd.t.total": ["ods.orders.amt", "ods.orders.qty"],
        "dwd.t.tag": [],
        "dwd.t.city": ["ods.orders.city"],
    }


@pytest.mark.parametrize("dialect", DIALECTS)
def test_insert_overwrite_static_partition(dialect):
    r, cols = run(
        "INSERT OVERWRITE TABLE dwd.t PARTITION (dt = '2024-06-01') SELECT s.a, s.b FROM ods.s s WHERE s.dt = "
        "'2024-06-01'",
        dialect,
    )
    assert (r.sources, r.targets) == (["ods.s"], ["dwd.t"])
    # A static partition column is a constant: it maps to no source column.
    assert cols == {"dwd.t.a": ["ods.s.a"], "dwd.t.b": ["ods.s.b"], "dwd.t.dt": []}
    assert r.dataset_dependencies == ["ods.s.dt"]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_insert_overwrite_dynamic_partition_maps_trailing_outputs(dialect):
    r, cols = run(
        "INSERT OVERWRITE TABLE dwd.t PARTITION (dt = '2024-06-01', hr) "
        "SELECT a, b, hour(created_at) AS h FROM ods.s",
        dialect,
    )
    assert cols == {
        "dwd.t.a": ["ods.s.a"],
        "dwd.t.b": ["ods.s.b"],
        "dwd.t.hr": ["ods.s.created_at"],
        "dwd.t.dt": [],
    }


@pytest.mark.parametrize(
    "dialect, ddl",
    [
        (
            "spark",
            "CREATE TABLE IF NOT EXISTS dwd.p (x INT, y STRING, dt STRING) USING parquet PARTITIONED BY (dt)",
        ),
        (
            "hive",
            "CREATE TABLE IF NOT EXISTS dwd.p (x INT, y STRING) PARTITIONED BY (dt STRING) STORED AS ORC",
        ),
    ],
)
def test_insert_maps_by_position_to_known_target_columns(dialect, ddl):
    r, cols = run(f"{ddl}; INSERT OVERWRITE TABLE dwd.p PARTITION (dt) SELECT a, b, d FROM ods.s", dialect)
    assert r.targets == ["dwd.p"] and r.sources == ["ods.s"]
    assert cols == {"dwd.p.x": ["ods.s.a"], "dwd.p.y": ["ods.s.b"], "dwd.p.dt": ["ods.s.d"]}


@pytest.mark.parametrize("dialect", DIALECTS)
def test_insert_with_column_list_and_schema_positions(dialect):
    _, cols = run("INSERT INTO dwd.t (k, v) SELECT a, b + 1 FROM ods.s", dialect)
    assert cols == {"dwd.t.k": ["ods.s.a"], "dwd.t.v": ["ods.s.b"]}
    _, cols = run(
        "INSERT INTO dwd.t SELECT a, b FROM ods.s", dialect, schema={"dwd.t": {"k": "int", "v": "int"}}
    )
    assert cols == {"dwd.t.k": ["ods.s.a"], "dwd.t.v": ["ods.s.b"]}


@pytest.mark.parametrize("dialect", DIALECTS)
def test_ctes_are_traced_to_real_tables(dialect):
    r, cols = run(
        """
        WITH paid AS (SELECT user_id, amount FROM ods.orders WHERE status = 'paid'),
             per_user AS (SELECT user_id, sum(amount) AS total FROM paid GROUP BY user_id)
        INSERT OVERWRITE TABLE ads.user_total
        SELECT p.user_id, p.total, u.city FROM per_user p JOIN dwd.users u ON u.id = p.user_id
        """,
        dialect,
    )
    assert r.sources == ["dwd.users", "ods.orders"] and r.targets == ["ads.user_total"]
    assert cols == {
        "ads.user_total.user_id": ["ods.orders.user_id"],
        "ads.user_total.total": ["ods.orders.amount"],
        "ads.user_total.city": ["dwd.users.city"],
    }
    assert r.dataset_dependencies == ["dwd.users.id", "ods.orders.status", "ods.orders.user_id"]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_subqueries_in_from_are_traced_to_real_tables(dialect):
    r, cols = run(
        "INSERT INTO dwd.t SELECT x.k, x.m FROM (SELECT y.k, max(y.v) AS m FROM (SELECT key AS k, val AS v "
        "FROM ods.s) y GROUP BY y.k) x",
        dialect,
    )
    assert r.sources == ["ods.s"]
    assert cols == {"dwd.t.k": ["ods.s.key"], "dwd.t.m": ["ods.s.val"]}
    assert r.dataset_dependencies == ["ods.s.key"]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_scalar_in_and_exists_subqueries(dialect):
    r, cols = run(
        "INSERT INTO dwd.t SELECT a.id, (SELECT max(b.v) FROM ods.b b WHERE b.id = a.id) AS best FROM ods.a a "
        "WHERE a.k IN (SELECT k FROM ods.c WHERE flag = 1) AND EXISTS (SELECT 1 FROM ods.d d WHERE d.id = a.id)",
        dialect,
    )
    assert r.sources == ["ods.a", "ods.b", "ods.c", "ods.d"]
    assert cols == {"dwd.t.id": ["ods.a.id"], "dwd.t.best": ["ods.b.v"]}
    assert r.dataset_dependencies == ["ods.a.id", "ods.a.k", "ods.b.id", "ods.c.flag", "ods.c.k", "ods.d.id"]


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("op", ["UNION ALL", "UNION"])
def test_union_maps_by_position(dialect, op):
    r, cols = run(
        f"INSERT INTO TABLE dwd.u SELECT a, b FROM ods.x {op} SELECT c, d FROM ods.y {op} SELECT e, 1 FROM ods.z",
        dialect,
    )
    assert r.sources == ["ods.x", "ods.y", "ods.z"]
    assert cols == {"dwd.u.a": ["ods.x.a", "ods.y.c", "ods.z.e"], "dwd.u.b": ["ods.x.b", "ods.y.d"]}


@pytest.mark.parametrize("dialect", DIALECTS)
def test_hive_multi_insert(dialect):
    r, cols = run(
        "FROM ods.src s "
        "INSERT OVERWRITE TABLE dwd.a PARTITION (dt = '2024-06-01') SELECT s.x, s.y WHERE s.k = 1 "
        "INSERT INTO TABLE dwd.b SELECT s.z AS zz",
        dialect,
    )
    assert r.sources == ["ods.src"] and r.targets == ["dwd.a", "dwd.b"]
    assert cols == {
        "dwd.a.x": ["ods.src.x"],
        "dwd.a.y": ["ods.src.y"],
        "dwd.a.dt": [],
        "dwd.b.zz": ["ods.src.z"],
    }
    assert r.target_dependencies == {"dwd.a": ["ods.src.k"], "dwd.b": []}
    assert r.target_sources == {"dwd.a": ["ods.src"], "dwd.b": ["ods.src"]}


@pytest.mark.parametrize("dialect", DIALECTS)
def test_ctas(dialect):
    r, cols = run("CREATE TABLE dwd.c AS SELECT s.a, count(1) AS n FROM ods.s s GROUP BY s.a", dialect)
    assert (r.sources, r.targets) == (["ods.s"], ["dwd.c"])
    assert cols == {"dwd.c.a": ["ods.s.a"], "dwd.c.n": []}
    assert r.dataset_dependencies == ["ods.s.a"]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_create_view_with_and_without_column_list(dialect):
    r, cols = run("CREATE VIEW dwd.v AS SELECT a, b FROM ods.s", dialect)
    assert (r.sources, r.targets) == (["ods.s"], ["dwd.v"])
    assert cols == {"dwd.v.a": ["ods.s.a"], "dwd.v.b": ["ods.s.b"]}
    _, cols = run("CREATE VIEW dwd.v (x, y) AS SELECT a, b FROM ods.s", dialect)
    assert cols == {"dwd.v.x": ["ods.s.a"], "dwd.v.y": ["ods.s.b"]}


@pytest.mark.parametrize("dialect", DIALECTS)
def test_merge_into(dialect):
    r, cols = run(
        """
        MERGE INTO dwd.t AS t
        USING (SELECT id, v, op FROM ods.s WHERE dt = '2024-06-01') AS s
        ON t.id = s.id
        WHEN MATCHED AND s.op = 'D' THEN DELETE
        WHEN MATCHED THEN UPDATE SET t.v = s.v, t.w = t.w + s.v
        WHEN NOT MATCHED THEN INSERT (id, v) VALUES (s.id, s.v)
        """,
        dialect,
    )
    assert (r.sources, r.targets) == (["ods.s"], ["dwd.t"])
    # t.w = t.w + s.v: the target's own previous value is no lineage edge (no self-loop).
    assert cols == {"dwd.t.v": ["ods.s.v"], "dwd.t.w": ["ods.s.v"], "dwd.t.id": ["ods.s.id"]}
    assert r.dataset_dependencies == ["ods.s.dt", "ods.s.id", "ods.s.op"]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_merge_insert_star_uses_source_columns(dialect):
    _, cols = run(
        "MERGE INTO dwd.t t USING ods.s s ON t.id = s.id WHEN MATCHED THEN UPDATE SET * "
        "WHEN NOT MATCHED THEN INSERT *",
        dialect,
        schema={"ods.s": {"id": "int", "v": "string"}},
    )
    assert cols == {"dwd.t.id": ["ods.s.id"], "dwd.t.v": ["ods.s.v"]}


@pytest.mark.parametrize("dialect", DIALECTS)
def test_update_set(dialect):
    r, cols = run("UPDATE dwd.t SET v = x * 2, w = 0 WHERE id = 3", dialect)
    assert r.targets == ["dwd.t"] and r.sources == []
    assert cols == {"dwd.t.v": ["dwd.t.x"], "dwd.t.w": []}


@pytest.mark.parametrize("dialect", DIALECTS)
def test_lateral_view_explode(dialect):
    r, cols = run(
        "INSERT INTO dwd.tags SELECT t.id, e.tag FROM ods.t t LATERAL VIEW explode(split(t.tags, ',')) e AS tag",
        dialect,
    )
    assert r.sources == ["ods.t"]
    assert cols == {"dwd.tags.id": ["ods.t.id"], "dwd.tags.tag": ["ods.t.tags"]}


@pytest.mark.parametrize("dialect", DIALECTS)
def test_lateral_view_outer_posexplode_unqualified(dialect):
    _, cols = run(
        "INSERT INTO dwd.items SELECT id, pos, item FROM ods.t LATERAL VIEW OUTER posexplode(items) e AS pos, item",
        dialect,
    )
    assert cols == {
        "dwd.items.id": ["ods.t.id"],
        "dwd.items.pos": ["ods.t.items"],
        "dwd.items.item": ["ods.t.items"],
    }


@pytest.mark.parametrize("dialect", DIALECTS)
def test_lateral_view_json_tuple(dialect):
    _, cols = run(
        "INSERT INTO dwd.j SELECT t.id, j.a, j.b FROM ods.t t LATERAL VIEW json_tuple(t.js, 'a', 'b') j AS a, b",
        dialect,
    )
    assert cols == {"dwd.j.id": ["ods.t.id"], "dwd.j.a": ["ods.t.js"], "dwd.j.b": ["ods.t.js"]}


@pytest.mark.parametrize("dialect", DIALECTS)
def test_window_functions(dialect):
    r, cols = run(
        "INSERT OVERWRITE TABLE dwd.w SELECT id, sum(amt) OVER (PARTITION BY uid ORDER BY ts) AS running, "
        "row_number() OVER (PARTITION BY shop ORDER BY amt DESC) AS rn FROM ods.o",
        dialect,
    )
    assert cols == {"dwd.w.id": ["ods.o.id"], "dwd.w.running": ["ods.o.amt"], "dwd.w.rn": []}
    assert r.dataset_dependencies == ["ods.o.amt", "ods.o.shop", "ods.o.ts", "ods.o.uid"]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_select_star_expanded_with_schema(dialect):
    schema = {"ods.a": {"id": "int", "v": "string"}, "ods.b": {"id": "int", "w": "double"}}
    _, cols = run("INSERT INTO dwd.t SELECT * FROM ods.a", dialect, schema=schema)
    assert cols == {"dwd.t.id": ["ods.a.id"], "dwd.t.v": ["ods.a.v"]}
    _, cols = run(
        "INSERT INTO dwd.t SELECT b.*, a.v FROM ods.a a JOIN ods.b b ON a.id = b.id", dialect, schema=schema
    )
    assert cols == {"dwd.t.id": ["ods.b.id"], "dwd.t.w": ["ods.b.w"], "dwd.t.v": ["ods.a.v"]}
    # Through a CTE and a subquery.
    _, cols = run(
        "WITH c AS (SELECT * FROM ods.a) INSERT INTO dwd.t SELECT * FROM (SELECT * FROM c) x",
        dialect,
        schema=schema,
    )
    assert cols == {"dwd.t.id": ["ods.a.id"], "dwd.t.v": ["ods.a.v"]}


@pytest.mark.parametrize("dialect", DIALECTS)
def test_select_star_without_schema_is_a_table_star_column(dialect):
    r, cols = run("INSERT INTO dwd.t SELECT * FROM ods.a", dialect)
    assert r.sources == ["ods.a"]
    assert cols == {"dwd.t.*": ["ods.a.*"]}
    # A named column of an unexpanded star still reaches the real table.
    _, cols = run("WITH c AS (SELECT * FROM ods.a) INSERT INTO dwd.t SELECT c.x, y FROM c", dialect)
    assert cols == {"dwd.t.x": ["ods.a.x"], "dwd.t.y": ["ods.a.y"]}


@pytest.mark.parametrize(
    "dialect, create_temp",
    [
        ("spark", "CREATE OR REPLACE TEMPORARY VIEW v AS"),
        ("spark", "CACHE TABLE v AS"),
        ("hive", "CREATE TEMPORARY TABLE v AS"),
    ],
)
def test_temporary_tables_are_hidden_and_pass_lineage_through(dialect, create_temp):
    r, cols = run(
        f"{create_temp} SELECT id, amt * 2 AS amt2 FROM ods.o WHERE st = 1;\n"
        "INSERT INTO dwd.x SELECT v.id, sum(v.amt2) AS total FROM v GROUP BY v.id",
        dialect,
    )
    assert r.sources == ["ods.o"] and r.targets == ["dwd.x"]
    assert cols == {"dwd.x.id": ["ods.o.id"], "dwd.x.total": ["ods.o.amt"]}
    # The temp table's own filter is a dependency of the final target.
    assert r.dataset_dependencies == ["ods.o.id", "ods.o.st"]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_table_created_and_dropped_in_script_is_hidden(dialect):
    r, cols = run(
        """
        DROP TABLE IF EXISTS tmp.t1;
        CREATE TABLE tmp.t1 AS SELECT s.a, u.b FROM ods.s s JOIN ods.u u ON s.id = u.id;
        INSERT OVERWRITE TABLE dwd.z SELECT a AS aa, b FROM tmp.t1;
        DROP TABLE tmp.t1;
        """,
        dialect,
    )
    assert r.sources == ["ods.s", "ods.u"] and r.targets == ["dwd.z"]
    assert cols == {"dwd.z.aa": ["ods.s.a"], "dwd.z.b": ["ods.u.b"]}
    assert r.dataset_dependencies == ["ods.s.id", "ods.u.id"]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_table_created_and_kept_is_a_target_and_a_source(dialect):
    r, cols = run(
        "CREATE TABLE dwd.a AS SELECT x FROM ods.s; INSERT INTO ads.b SELECT x AS y FROM dwd.a",
        dialect,
    )
    assert r.targets == ["ads.b", "dwd.a"] and r.sources == ["dwd.a", "ods.s"]
    assert cols == {"ads.b.y": ["dwd.a.x"], "dwd.a.x": ["ods.s.x"]}


@pytest.mark.parametrize("dialect", DIALECTS)
def test_statements_without_lineage(dialect):
    r, cols = run(
        """
        ADD JAR hdfs:///libs/udf.jar;
        CREATE TEMPORARY FUNCTION my_udf AS 'com.example.Udf';
        SET hive.exec.dynamic.partition.mode=nonstrict;
        USE dwd;
        ANALYZE TABLE dwd.x COMPUTE STATISTICS;
        MSCK REPAIR TABLE dwd.x;
        DROP TABLE IF EXISTS dwd.y;
        DESCRIBE dwd.x;
        """,
        dialect,
    )
    assert (r.sources, r.targets, cols, r.dataset_dependencies) == ([], [], {}, [])


@pytest.mark.parametrize("dialect", DIALECTS)
def test_default_target_turns_final_select_into_insert(dialect):
    r, cols = run(
        "SELECT o.order_id, o.amount FROM ods.orders o WHERE o.dt = '2024-06-01'",
        dialect,
        default_target="dwd.order_detail",
    )
    assert (r.sources, r.targets) == (["ods.orders"], ["dwd.order_detail"])
    assert cols == {
        "dwd.order_detail.order_id": ["ods.orders.order_id"],
        "dwd.order_detail.amount": ["ods.orders.amount"],
    }
    # Without it, a bare SELECT only reads.
    r, cols = run("SELECT o.order_id FROM ods.orders o", dialect)
    assert (r.sources, r.targets, cols) == (["ods.orders"], [], {})
