"""Governance rules: layering and naming, from a table -> sources map and from a graph."""

from __future__ import annotations

from sharp_dagster.lineage.governance import SOURCE, GovernanceRules, Violation, check, layer_of
from sharp_dagster.lineage.graph import Dataset, LineageGraph, dataset_urn


def test_layer_of():
    assert layer_of("dwd.order_detail") == "dwd"
    assert layer_of("mysql:shop.orders") == SOURCE
    assert layer_of("src_shop.orders_changes") == SOURCE
    assert layer_of("tmp_table") == SOURCE


def test_a_clean_warehouse_has_no_violation():
    reads = {
        "ods.orders": ["src_shop.orders_snapshot", "mysql:shop.orders"],
        "dwd.order_detail": ["ods.orders", "dwd.user_dim"],
        "dwd.user_dim": ["ods.user_info"],
        "ads.gmv": ["dwd.order_detail", "ads.gmv"],
    }
    assert check(reads) == []


def test_layer_violations():
    reads = {
        "ads.gmv": ["ods.orders", "dwd.order_detail"],  # ads may not read ods directly
        "dwd.detail": ["ads.gmv", "src_shop.orders_changes"],  # dwd reads only ods / dwd
        "ods.orders": ["dwd.detail"],  # ods reads sources only
    }
    got = check(reads)
    assert [(v.table, v.rule) for v in got] == [
        ("ads.gmv", "layer"),
        ("dwd.detail", "layer"),
        ("dwd.detail", "layer"),
        ("ods.orders", "layer"),
    ]
    assert got[0].message == (
        "ads.gmv: an ads table reads an ods table ods.orders directly; ads may read only ads, dwd"
    )
    assert "a dwd table reads a source table src_shop.orders_changes" in got[1].message
    assert "a dwd table reads an ads table ads.gmv" in got[2].message
    assert "dwd.detail" in got[3].message and "ods may read only source" in got[3].message


def test_naming_violations_and_per_layer_patterns():
    reads = {
        "dwd.OrderDetail": ["ods.orders"],
        "dwd.order__x": ["ods.orders"],
        "dwd.fact_orders": ["ods.orders"],
        "ads.gmv_daily": ["dwd.fact_orders"],
    }
    got = check(reads)
    assert [(v.table, v.rule) for v in got] == [("dwd.OrderDetail", "naming"), ("dwd.order__x", "naming")]
    assert "'OrderDetail'" in got[0].message
    rules = GovernanceRules(naming={"*": r"^[a-z][a-z0-9_]*$", "dwd": r"^(fact|dim)_[a-z0-9_]+$"})
    got = check(reads, rules)
    assert [(v.table, v.rule) for v in got] == [("dwd.OrderDetail", "naming"), ("dwd.order__x", "naming")]
    assert "^(fact|dim)_[a-z0-9_]+$" in got[1].message
    assert check({"ads.GMV": []}, GovernanceRules(naming={})) == []


def test_check_reads_edges_from_a_graph():
    names = ["ods.orders", "dwd.detail", "ads.gmv"]
    g = LineageGraph(
        [Dataset.from_qualified(n) for n in names]
        + [Dataset.from_qualified("mysql:shop.orders", kind="external")],
        [
            (dataset_urn(a), dataset_urn(b))
            for a, b in [
                ("mysql:shop.orders", "ods.orders"),
                ("ods.orders", "dwd.detail"),
                ("ods.orders", "ads.gmv"),
                ("dwd.detail", "ads.gmv"),
            ]
        ],
    )
    assert check(g) == [
        Violation(
            "ads.gmv",
            "layer",
            "ads.gmv: an ads table reads an ods table ods.orders directly; ads may read only ads, dwd",
        )
    ]
