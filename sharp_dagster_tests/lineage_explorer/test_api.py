"""The explorer's JSON API over HTTP, against a server started here on a free loopback port."""

from __future__ import annotations

import json
import re
from urllib.parse import quote

from sharp_dagster.lineage.graph import dataset_urn
from sharp_dagster_tests.lineage.util import run_direct
from sharp_dagster_tests.lineage_explorer.conftest import get

GMV = "urn:sharp:dataset:spark:ads.gmv_by_category"
DETAIL = "urn:sharp:dataset:spark:dwd.order_detail"


def test_graph_is_the_cli_json(project_server, project_graph):
    status, body, headers = get(
        f"{project_server.url}/api/graph?table=ads/gmv_by_category&direction=up&columns=1"
    )
    assert status == 200 and headers["Content-Type"].startswith("application/json")
    assert re.fullmatch(r"app;dur=[0-9.]+, cpu;dur=[0-9.]+", headers["Server-Timing"])
    assert body["root"] == GMV
    # The same answer `sharp-dagster lineage graph ads/gmv_by_category --direction up --columns` prints.
    expected = project_graph.traverse("ads/gmv_by_category", direction="up", columns=True)
    assert {k: v for k, v in body.items() if k != "root"} == expected
    assert body["vertices"][:2] == [GMV, DETAIL]
    assert "urn:sharp:dataset:spark:ods.order_item" in body["vertices"]
    assert "urn:sharp:dataset:mysql:shop.order_item" in body["vertices"]  # through the CDC path
    pairs = {(e["source"]["id"], e["target"]["id"]) for e in body["edges"]}
    assert (DETAIL, GMV) in pairs
    cols = {(e["source"]["id"], e["source"]["column"], e["target"]["column"]) for e in body["column_edges"]}
    assert (DETAIL, "line_amount", "gmv") in cols


def test_depth_and_direction(project_server):
    _, one, _ = get(f"{project_server.url}/api/graph?table=ads.gmv_by_category&direction=up&depth=1")
    assert one["vertices"] == [GMV, DETAIL]
    assert "column_edges" not in one
    _, zero, _ = get(f"{project_server.url}/api/graph?table=ads.gmv_by_category&depth=0")
    assert zero["vertices"] == [GMV] and zero["edges"] == []
    _, down, _ = get(f"{project_server.url}/api/graph?table=dwd/order_detail&direction=down&depth=all")
    assert set(down["vertices"]) == {
        DETAIL,
        GMV,
        "urn:sharp:dataset:spark:ads.user_order_stats",
    }
    _, both, _ = get(f"{project_server.url}/api/graph?table=dwd/order_detail&direction=both&depth=1")
    assert {GMV, "urn:sharp:dataset:spark:ods.order_item"} <= set(both["vertices"])


def test_table_page_json(project_server):
    status, body, _ = get(f"{project_server.url}/api/table?table=ads/gmv_by_category")
    assert status == 200
    assert body["table"]["qualified"] == "ads.gmv_by_category"
    assert body["table"]["layer"] == "ads" and body["table"]["path"] == "/table/ads/gmv_by_category"
    assert body["upstream"] == ["dwd.order_detail"] and body["downstream"] == []
    columns = {c["name"]: c for c in body["columns"]}
    assert {"category", "gmv", "gmv_share", "order_count"} <= set(columns)
    assert columns["gmv"]["sources"] == [{"table": "dwd.order_detail", "column": "line_amount"}]
    assert body["governance"] == []


def test_column_path_and_drop_impact(project_server):
    status, body, _ = get(f"{project_server.url}/api/column?table=dwd.order_detail&column=line_amount")
    assert status == 200
    impact = {(c["table"], c["column"]) for c in body["impact"]}
    # The columns computed from it break, and the tables whose rows it groups/filters are listed as tables.
    assert {
        ("ads.gmv_by_category", "gmv"),
        ("ads.gmv_by_category", "gmv_share"),
        ("ads.user_order_stats", "order_amount"),
    } <= impact
    assert all(t.startswith("ads.") for t, _ in impact)
    impact_edges = {(e["target"]["table"], e["target"]["column"]) for e in body["impact_path"]}
    assert ("ads.gmv_by_category", "gmv") in impact_edges
    origins = {(c["table"], c["column"]) for c in body["origins"]}
    assert origins == {("ods.order_item", "quantity"), ("ods.order_item", "unit_price")}

    # Two hops up from an ADS column: gmv <- dwd line_amount <- ods quantity/unit_price.
    _, gmv, _ = get(f"{project_server.url}/api/column?table=ads/gmv_by_category&column=gmv")
    path = {(e["source"]["table"], e["source"]["column"], e["target"]["column"]) for e in gmv["path"]}
    assert ("dwd.order_detail", "line_amount", "gmv") in path
    assert ("ods.order_item", "unit_price", "line_amount") in path
    assert {"table": "ods.order_item", "column": "unit_price"} in gmv["sources"]
    assert gmv["impact"] == []


def test_impact_view_answers_as_the_cli(project_server, capsys):
    """`/api/impact` and the column view's impact are the CLI's `lineage impact --json`, one engine, same lines."""
    for ref in ("ods.orders.order_status", "ods/order_item.quantity", "dwd.order_detail.line_amount"):
        assert run_direct(["lineage", "impact", "--json", ref]) == 0
        cli = json.loads(capsys.readouterr().out)
        status, body, _ = get(f"{project_server.url}/api/impact?column={ref}")
        assert status == 200 and body["impact"] == cli, ref
        table, column = body["table"], body["column"]
        _, view, _ = get(f"{project_server.url}/api/column?table={table}&column={column}")
        assert view["impact"] == cli, ref
    _, status_view, _ = get(f"{project_server.url}/api/impact?column=ods.orders.order_status")
    dwd = {(i["column"], r["file"], r["line"]) for i in status_view["impact"] for r in i["reads"]}
    assert ("order_status", "dwd/order_detail.sql", 9) in dwd and (
        "is_cancelled",
        "dwd/order_detail.sql",
        17,
    ) in dwd
    status, err, _ = get(f"{project_server.url}/api/impact?column=ods.orders.nope")
    assert status == 404 and "nope" in err["error"]
    status, err, _ = get(f"{project_server.url}/api/impact")
    assert status == 400 and "column" in err["error"]


def test_bad_requests_are_named(project_server):
    url = project_server.url
    status, body, _ = get(f"{url}/api/graph?table=ads/nope")
    assert status == 404 and "ads/nope" in body["error"]
    status, body, _ = get(f"{url}/api/graph?table=ads/gmv_by_category&direction=sideways")
    assert status == 400 and "sideways" in body["error"]
    status, body, _ = get(f"{url}/api/graph?table=ads/gmv_by_category&depth=-1")
    assert status == 400 and "depth" in body["error"]
    status, body, _ = get(f"{url}/api/graph?table=ads/gmv_by_category&depth=two")
    assert status == 400 and "'two'" in body["error"]
    status, body, _ = get(f"{url}/api/graph")
    assert status == 400 and "table" in body["error"]
    status, body, _ = get(f"{url}/api/column?table=dwd.order_detail&column=nope")
    assert status == 404 and "'nope'" in body["error"] and "line_amount" in body["error"]
    status, body, _ = get(f"{url}/api/nothing")
    assert status == 404


def test_page_and_library_come_from_this_server(project_server):
    status, html, headers = get(f"{project_server.url}/table/ads/gmv_by_category")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert '<script src="/static/vendor/echarts.min.js">' in html
    assert "http" not in html.replace('charset="utf-8"', "")  # nothing loaded from another host
    status, js, headers = get(f"{project_server.url}/static/vendor/echarts.min.js")
    assert status == 200 and "javascript" in headers["Content-Type"]
    assert len(js) > 500_000 and "Apache" in js[:2000]
    status, app, _ = get(f"{project_server.url}/static/app.js")
    assert status == 200 and "/api/graph" in app
    for probe in (
        "/static/../server.py",
        "/static/node_modules/echarts/package.json",
        "/static/package.json",
    ):
        assert get(project_server.url + quote(probe, safe="/."))[0] == 404, probe


def test_governance_warnings_and_cycles(made_server):
    url = made_server.url
    _, bad, _ = get(f"{url}/api/table?table=ads/BadName")
    rules = {v["rule"] for v in bad["governance"]}
    assert rules == {"layer", "naming"}
    assert any("ods.a" in v["message"] for v in bad["governance"])
    _, gov, _ = get(f"{url}/api/governance")
    assert {v["table"] for v in gov["violations"]} == {"ads.BadName"}
    _, tables, _ = get(f"{url}/api/tables")
    counts = {t["qualified"]: t["violations"] for t in tables["tables"]}
    assert counts["ads.BadName"] == 2 and counts["ads.c"] == 0
    # dwd.b <-> dwd.loop is a cycle: the walks end and list each edge once.
    _, both, _ = get(f"{url}/api/graph?table=dwd.b&direction=both")
    assert set(both["vertices"]) == {
        dataset_urn(n) for n in ("dwd.b", "ods.a", "dwd.loop", "ads.c", "ads.BadName")
    }
    _, col, _ = get(f"{url}/api/column?table=dwd.b&column=x2")
    assert {(c["table"], c["column"]) for c in col["impact"]} >= {
        ("ads.c", "total"),
        ("dwd.loop", "y"),
        ("dwd.b", "y"),
    }
    assert ("ads.BadName", "*") in {(c["table"], c["column"]) for c in col["impact"]}


def test_missing_library_names_the_install_step(made_server, monkeypatch):
    from pathlib import Path

    from sharp_dagster.lineage.explorer import server

    monkeypatch.setitem(server.VENDOR_FILES, "echarts.min.js", Path("node_modules/absent/echarts.min.js"))
    status, body, _ = get(f"{made_server.url}/static/vendor/echarts.min.js")
    assert status == 404 and "npm ci --prefix" in body["error"]
