"""Dataset dependencies, identifier case, parse errors, script-level behaviour and the result's shape."""

from __future__ import annotations

import pytest

from sharp_dagster.lineage.parser import LineageParseError, parse_script

from .util import run


@pytest.mark.parametrize("dialect", ["spark", "hive"])
def test_dataset_dependencies_are_kept_apart_from_the_column_map(dialect):
    r, cols = run(
        """
        INSERT OVERWRITE TABLE ads.shop_gmv
        SELECT o.shop_id, sum(o.amount) AS gmv,
               rank() OVER (PARTITION BY s.region ORDER BY sum(o.amount) DESC) AS rnk
        FROM ods.orders o
        JOIN ods.shops s ON s.id = o.shop_id AND s.active = 1
        WHERE o.status = 'paid'
        GROUP BY o.shop_id, s.region
        HAVING count(o.coupon) > 2
        ORDER BY gmv DESC
        """,
        dialect,
    )
    assert cols == {
        "ads.shop_gmv.shop_id": ["ods.orders.shop_id"],
        "ads.shop_gmv.gmv": ["ods.orders.amount"],
        "ads.shop_gmv.rnk": [],
    }
    assert r.dataset_dependencies == [
        "ods.orders.amount",  # ORDER BY gmv and the window's ORDER BY
        "ods.orders.coupon",  # HAVING
        "ods.orders.shop_id",  # JOIN ON, GROUP BY
        "ods.orders.status",  # WHERE
        "ods.shops.active",  # JOIN ON
        "ods.shops.id",  # JOIN ON
        "ods.shops.region",  # GROUP BY, window PARTITION BY
    ]
    # Columns only used to steer rows never appear as value sources.
    value_sources = {s for srcs in cols.values() for s in srcs}
    assert not value_sources & {
        "ods.orders.status",
        "ods.orders.coupon",
        "ods.shops.region",
        "ods.shops.active",
    }


def test_group_and_order_by_ordinals_and_aliases_resolve_to_outputs():
    r, _ = run("INSERT INTO dwd.t SELECT k AS key, sum(v) AS total FROM ods.a GROUP BY 1 ORDER BY total")
    assert r.dataset_dependencies == ["ods.a.k", "ods.a.v"]


def test_join_using_and_distribute_sort_by_are_dependencies():
    r, _ = run(
        "INSERT INTO dwd.t SELECT l.a FROM ods.l l JOIN ods.r r USING (id) DISTRIBUTE BY l.b SORT BY l.c"
    )
    assert r.dataset_dependencies == ["ods.l.b", "ods.l.c", "ods.l.id", "ods.r.id"]


def test_except_and_intersect_right_side_is_a_dependency():
    r, cols = run("INSERT INTO dwd.t SELECT id FROM ods.a EXCEPT SELECT uid FROM ods.b")
    assert r.sources == ["ods.a", "ods.b"]
    assert cols == {"dwd.t.id": ["ods.a.id"]}
    assert r.dataset_dependencies == ["ods.b.uid"]


@pytest.mark.parametrize("dialect", ["spark", "hive"])
def test_identifiers_are_case_insensitive_in_spark_and_hive(dialect):
    r, cols = run(
        "INSERT INTO DWD.Tab SELECT O.ID, o.Amt AS Amount FROM ODS.Orders O",
        dialect,
        schema={"Ods.ORDERS": {"Id": "int", "AMT": "double"}},
    )
    assert (r.sources, r.targets) == (["ods.orders"], ["dwd.tab"])
    assert cols == {"dwd.tab.id": ["ods.orders.id"], "dwd.tab.amount": ["ods.orders.amt"]}
    # Mixed-case names of the same table are one table; the schema matched case-insensitively for SELECT *.
    r, cols = run(
        "CREATE TEMPORARY VIEW V AS SELECT * FROM ods.ORDERS; INSERT INTO dwd.t SELECT * FROM v",
        "spark",
        schema={"Ods.ORDERS": {"Id": "int"}},
    )
    assert cols == {"dwd.t.id": ["ods.orders.id"]} and r.sources == ["ods.orders"]


def test_mysql_and_ansi_keep_names_as_written():
    r, cols = run("INSERT INTO shop.Daily (a) SELECT X FROM shop.Orders", "mysql")
    assert (r.sources, r.targets) == (["shop.Orders"], ["shop.Daily"])
    assert cols == {"shop.Daily.a": ["shop.Orders.X"]}
    r, cols = run("INSERT INTO t SELECT u.x FROM s CROSS JOIN UNNEST(s.arr) AS u(x)", "ansi")
    assert cols == {"t.x": ["s.arr"]}


def test_unqualified_column_goes_to_the_source_the_schema_says_has_it():
    schema = {"ods.a": {"id": "int"}, "ods.b": {"id": "int", "w": "int"}}
    _, cols = run("INSERT INTO dwd.t SELECT w FROM ods.a JOIN ods.b ON a.id = b.id", schema=schema)
    assert cols == {"dwd.t.w": ["ods.b.w"]}


def test_struct_fields_and_lambdas():
    _, cols = run(
        "INSERT INTO dwd.t SELECT x.info.city AS c, transform(x.arr, v -> v + x.bonus) AS z FROM ods.t x"
    )
    assert cols == {"dwd.t.c": ["ods.t.info"], "dwd.t.z": ["ods.t.arr", "ods.t.bonus"]}


def test_temporary_view_replaced_later_is_resolved_per_version():
    r, cols = run(
        """
        CREATE OR REPLACE TEMPORARY VIEW v AS SELECT a FROM ods.x;
        INSERT INTO dwd.t1 SELECT a FROM v;
        CREATE OR REPLACE TEMPORARY VIEW v AS SELECT b AS a FROM ods.y;
        INSERT INTO dwd.t2 SELECT a FROM v;
        """
    )
    assert cols == {"dwd.t1.a": ["ods.x.a"], "dwd.t2.a": ["ods.y.b"]}
    assert r.target_sources == {"dwd.t1": ["ods.x"], "dwd.t2": ["ods.y"]}


def test_chained_temporary_views_pass_dependencies_through():
    r, cols = run(
        """
        CREATE TEMPORARY VIEW v1 AS SELECT id, amt FROM ods.o WHERE dt = '2024-06-01';
        CREATE TEMPORARY VIEW v2 AS SELECT id, amt * 2 AS a2 FROM v1 WHERE amt > 0;
        INSERT INTO ads.x SELECT id, a2 FROM v2;
        """
    )
    assert cols == {"ads.x.id": ["ods.o.id"], "ads.x.a2": ["ods.o.amt"]}
    assert r.dataset_dependencies == ["ods.o.amt", "ods.o.dt"]


def test_table_read_before_the_script_creates_it_stays_real():
    r, cols = run(
        "INSERT INTO dwd.keep SELECT a FROM tmp.t; CREATE TABLE tmp.t AS SELECT a FROM ods.s; "
        "INSERT INTO dwd.x SELECT a FROM tmp.t; DROP TABLE tmp.t"
    )
    assert r.sources == ["ods.s", "tmp.t"] and r.targets == ["dwd.keep", "dwd.x"]
    assert cols == {"dwd.keep.a": ["tmp.t.a"], "dwd.x.a": ["ods.s.a"]}


@pytest.mark.parametrize(
    "sql, line, col",
    [
        ("SELECT a FROM t;\nSELECT a, FROM WHERE", 2, 16),
        ("select a\nfrom t where x = = 1", 2, 18),
        ("SELECT a FROM t WHERE s = 'abc", 1, 27),
        ("INSERT INTO dwd.t\nSELECT a FROM ods.s\nWHERE (a > 1", 3, 12),
    ],
)
def test_parse_error_carries_line_and_column(sql, line, col):
    with pytest.raises(LineageParseError) as info:
        parse_script(sql)
    assert (info.value.line, info.value.col) == (line, col)
    assert str(info.value).startswith(f"line {line}, column {col}: ")
    assert isinstance(info.value, ValueError)


def test_unsupported_dialect_is_named():
    with pytest.raises(ValueError, match="unsupported SQL dialect 'oracle'"):
        parse_script("SELECT 1", dialect="oracle")


def test_to_dict_shape_and_timing():
    r = parse_script("INSERT INTO dwd.t SELECT a FROM ods.s WHERE b > 0")
    d = r.to_dict()
    assert list(d) == ["sources", "targets", "columns", "dataset_dependencies", "elapsed_ms"]
    assert d["columns"] == [{"target": "dwd.t.a", "sources": ["ods.s.a"]}]
    assert d["dataset_dependencies"] == ["ods.s.b"]
    assert isinstance(d["elapsed_ms"], float) and 0 < d["elapsed_ms"] < 10_000


def test_calls_do_not_leak_state_into_each_other():
    schema = {"ods.a": {"x": "int", "y": "int"}}
    with_schema = parse_script("INSERT INTO dwd.t SELECT * FROM ods.a", schema=schema)
    without = parse_script("INSERT INTO dwd.t SELECT * FROM ods.a")
    assert [c.target for c in with_schema.columns] == ["dwd.t.x", "dwd.t.y"]
    assert [c.target for c in without.columns] == ["dwd.t.*"]
    # A temp view of one script is unknown to the next one.
    parse_script("CREATE TEMPORARY VIEW v AS SELECT x FROM ods.a")
    assert parse_script("INSERT INTO dwd.t SELECT x FROM v").sources == ["v"]


def test_default_target_after_temporary_views():
    r, cols = run(
        "CREATE TEMPORARY VIEW paid AS SELECT order_id, amount FROM ods.orders WHERE status = 'paid';\n"
        "SELECT order_id, amount * 100 AS cents FROM paid",
        default_target="DWD.Paid_Orders",
    )
    assert (r.sources, r.targets) == (["ods.orders"], ["dwd.paid_orders"])
    assert cols == {
        "dwd.paid_orders.order_id": ["ods.orders.order_id"],
        "dwd.paid_orders.cents": ["ods.orders.amount"],
    }
    assert r.dataset_dependencies == ["ods.orders.status"]


def test_mysql_multi_table_update():
    r, cols = run("UPDATE shop.t a JOIN shop.s b ON a.id = b.id SET a.v = b.v + a.w WHERE b.k > 0", "mysql")
    assert (r.sources, r.targets) == (["shop.s"], ["shop.t"])
    assert cols == {"shop.t.v": ["shop.s.v", "shop.t.w"]}
    assert r.dataset_dependencies == ["shop.s.id", "shop.s.k"]


def test_recursive_cte_reads_no_table_named_after_itself():
    r, cols = run(
        "WITH RECURSIVE r AS (SELECT id, parent_id FROM ods.tree UNION ALL SELECT r.id, t.parent_id FROM r "
        "JOIN ods.tree t ON t.id = r.parent_id) INSERT INTO dwd.closure SELECT id, parent_id FROM r",
        "ansi",
    )
    assert r.sources == ["ods.tree"]
    assert cols == {"dwd.closure.id": ["ods.tree.id"], "dwd.closure.parent_id": ["ods.tree.parent_id"]}


def test_module_docstring_example_holds():
    import doctest

    from sharp_dagster.lineage import parser

    failures, tried = doctest.testmod(parser)
    assert tried >= 2 and failures == 0


@pytest.mark.parametrize("dialect", ["spark", "hive"])
def test_table_valued_function_reads_no_table(dialect):
    r, cols = run("INSERT OVERWRITE TABLE ods.t SELECT id, id * 2 AS doubled FROM range(1000)", dialect)
    assert r.sources == []
    assert cols == {"ods.t.id": [], "ods.t.doubled": []}
    r, cols = run(
        "INSERT INTO ods.t SELECT r.id, o.x FROM range(10) AS r JOIN db.o AS o ON o.id = r.id", dialect
    )
    assert r.sources == ["db.o"]
    assert cols["ods.t.x"] == ["db.o.x"]
    assert r.dataset_dependencies == ["db.o.id"]
