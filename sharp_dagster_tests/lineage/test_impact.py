"""`lineage.impact`: what a change to a column breaks downstream, transitively, with the SQL file and line reading
it; on the repo's own SQL (ods.orders read by dwd/order_detail.sql, and through it by the ADS tables) and on small
scripts for the shapes a read can take."""

from __future__ import annotations

import pytest

from sharp_dagster.lineage.impact import Read, impact
from sharp_dagster.warehouse.catalog import load_catalog
from sharp_dagster.warehouse.catalog_lineage import build_project_graph, sql_texts

from .conftest import make_catalog


@pytest.fixture(scope="module")
def project():
    catalog = load_catalog()
    return build_project_graph(catalog), sql_texts(catalog)


def _rows(found):
    return [(i.table, i.column, i.kind, f"{i.via[0]}.{i.via[1]}", [str(r) for r in i.reads]) for i in found]


def test_an_ods_orders_column_through_dwd_to_ads(project):
    graph, texts = project
    found = impact(graph, texts, "ods.orders", "order_status")
    assert _rows(found) == [
        # is_cancelled (computed from order_status at line 17) filters both ADS tables' rows
        ("ads.gmv_by_category", "*", "rows", "dwd.order_detail.is_cancelled", ["ads/gmv_by_category.sql:12"]),
        (
            "ads.user_order_stats",
            "*",
            "rows",
            "dwd.order_detail.is_cancelled",
            ["ads/user_order_stats.sql:15"],
        ),
        ("dwd.order_detail", "is_cancelled", "value", "ods.orders.order_status", ["dwd/order_detail.sql:17"]),
        ("dwd.order_detail", "order_status", "value", "ods.orders.order_status", ["dwd/order_detail.sql:9"]),
    ]
    assert {i.changed for i in found} == {("ods.orders", "order_status")}


def test_two_hops_name_each_files_own_line(project):
    graph, texts = project
    found = {(i.table, i.column): i for i in impact(graph, texts, "ods/order_item", "quantity")}
    assert [str(r) for r in found["dwd.order_detail", "line_amount"].reads] == ["dwd/order_detail.sql:16"]
    assert found["ads.gmv_by_category", "gmv"].via == ("dwd.order_detail", "line_amount")
    assert [str(r) for r in found["ads.gmv_by_category", "gmv"].reads] == ["ads/gmv_by_category.sql:8"]
    assert [str(r) for r in found["ads.user_order_stats", "order_amount"].reads] == [
        "ads/user_order_stats.sql:10"
    ]
    # The window's ORDER BY SUM(line_amount) steers the rank's rows: that line, not the value lines.
    assert [str(r) for r in found["ads.gmv_by_category", "*"].reads] == ["ads/gmv_by_category.sql:9"]
    # A WHERE read is a rows impact at the WHERE's lines.
    time = {(i.table, i.column): i for i in impact(graph, texts, "ods.orders", "order_time")}
    assert [str(r) for r in time["dwd.order_detail", "*"].reads] == [
        "dwd/order_detail.sql:23",
        "dwd/order_detail.sql:24",
    ]


def test_the_same_columns_as_the_graphs_closure(project):
    """One engine: the impact names exactly the columns `LineageGraph.column_impact` finds, for every column of
    every ODS table the project reads."""
    graph, texts = project
    checked = 0
    for table in ("ods.orders", "ods.order_item", "ods.product", "ods.user_info"):
        for column in load_catalog().external_schemas[table]:
            ours = {(i.table, i.column) for i in impact(graph, texts, table, column)}
            assert ours == set(graph.column_impact(table, column)), (table, column)
            checked += bool(ours)
    assert checked >= 8


def test_select_star_names_the_from_line_and_unknown_files_have_no_reads():
    catalog = make_catalog(
        dwd__detail="SELECT\n  *,\n  amount * 2 AS double_amount\nFROM ods.orders\nWHERE amount > 0"
    )
    graph, texts = build_project_graph(catalog), sql_texts(catalog)
    found = {(i.table, i.column): i for i in impact(graph, texts, "ods.orders", "category")}
    # SELECT * names no column: the FROM that reads the table is where.
    assert found["dwd.detail", "category"].reads == (Read("dwd/detail.sql", 4),)
    assert found["ads.gmv", "category"].reads == (Read("ads/gmv.sql", 1),)
    amount = {(i.table, i.column): i for i in impact(graph, texts, "ods.orders", "amount")}
    assert amount["dwd.detail", "double_amount"].reads == (Read("dwd/detail.sql", 3),)
    assert amount["dwd.detail", "*"].reads == (Read("dwd/detail.sql", 5),)
    # Without the SQL files the columns are the same, with no reads.
    bare = impact(graph, {}, "ods.orders", "amount")
    assert [(i.table, i.column) for i in bare] == [(i.table, i.column) for i in amount.values()]
    assert all(i.reads == () for i in bare)
    assert impact(graph, texts, "ads.gmv", "gmv") == []
    with pytest.raises(KeyError, match="ods.nope"):
        impact(graph, texts, "ods.nope", "x")
