"""build_project_graph over a fake catalog: dependency order, SELECT * expansion, extra edges, errors."""

from __future__ import annotations

import pytest

from sharp_dagster.lineage.governance import check
from sharp_dagster.lineage.graph import dataset_urn
from sharp_dagster.warehouse.catalog_lineage import build_project_graph, project_lineage

from .conftest import make_catalog


def test_upstream_outputs_expand_select_star_downstream(fake_catalog):
    results = project_lineage(fake_catalog)
    assert list(results) == ["ods.orders", "dwd.detail", "ads.gmv"]  # dependency order
    detail = {c.target: c.sources for c in results["dwd.detail"].columns}
    assert detail == {
        "dwd.detail.order_id": ["ods.orders.order_id"],
        "dwd.detail.category": ["ods.orders.category"],
        "dwd.detail.amount": ["ods.orders.amount"],
        "dwd.detail.double_amount": ["ods.orders.amount"],
        # `*` over an upstream SQL table includes its partition column, as in Spark
        "dwd.detail.dt": ["ods.orders.dt"],
    }


def test_graph_vertices_kinds_and_writers(fake_catalog):
    g = build_project_graph(fake_catalog)
    kinds = {d.qualified: (d.kind, (d.writer or {}).get("name")) for d in g.datasets}
    assert kinds == {
        "ods.orders": ("asset", "ods/orders"),
        "dwd.detail": ("asset", "dwd/detail"),
        "ads.gmv": ("asset", "ads/gmv"),
        "src.orders_changes": ("asset", "src/orders_changes"),  # built by a non-SQL asset (extra edge)
        "mysql:shop.orders": ("external", None),
    }
    up = g.traverse("ads/gmv", "up")
    assert up["vertices"] == [
        dataset_urn(n)
        for n in ["ads.gmv", "dwd.detail", "ods.orders", "src.orders_changes", "mysql:shop.orders"]
    ]
    assert {(e["source"]["name"], e["target"]["name"]) for e in up["edges"]} == {
        ("detail", "gmv"),
        ("orders", "detail"),
        ("orders_changes", "orders"),
        ("orders", "orders_changes"),
    }


def test_column_impact_runs_from_the_source_system_to_the_report(fake_catalog):
    g = build_project_graph(fake_catalog)
    assert g.column_impact("mysql:shop.orders", "amount") == [
        ("ads.gmv", "gmv"),
        ("dwd.detail", "amount"),
        ("dwd.detail", "double_amount"),
        ("ods.orders", "amount"),
        ("src.orders_changes", "amount"),
        ("dwd.detail", "*"),  # WHERE amount > 0: a dataset-level dependency of the whole table
    ]
    # ads.gmv groups by category: dropping it breaks the whole table, not only the category column.
    assert ("ads.gmv", "category") in g.column_impact("ods.orders", "category")
    assert g.column_impact("src.orders_changes", "_op") == [("ods.orders", "*")]


def test_project_graph_passes_governance_and_catches_a_layer_skip(fake_catalog):
    assert check(build_project_graph(fake_catalog)) == []
    bad = make_catalog(ads__gmv="SELECT category, SUM(amount) AS gmv FROM ods.orders GROUP BY category")
    assert [(v.table, v.rule) for v in check(build_project_graph(bad))] == [("ads.gmv", "layer")]


def test_unparsable_table_sql_names_file_line_and_column():
    bad = make_catalog(dwd__detail="SELECT order_id,\nFROM WHERE")
    with pytest.raises(ValueError, match=r"/warehouse/dwd/detail.sql:2:6: SQL of dwd.detail: "):
        build_project_graph(bad)
