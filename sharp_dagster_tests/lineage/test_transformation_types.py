"""The kind of each lineage edge (OpenLineage's transformation types): DIRECT IDENTITY / TRANSFORMATION /
AGGREGATION and INDIRECT CONDITIONAL per source column, FILTER / JOIN / GROUP_BY / SORT / WINDOW per dependency;
the OpenLineage facet that carries them; and names holding a dot through the project graph."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sharp_dagster.lineage.openlineage import JobLineage, build_run_event
from sharp_dagster.lineage.parser import parse_script
from sharp_dagster.warehouse.catalog_lineage import build_project_graph, project_lineage

from .conftest import make_catalog
from .util import run


def kinds(sql: str, **kwargs) -> dict[str, dict[str, list[str]]]:
    r = parse_script(sql, **kwargs)
    return {c.target: c.transformations for c in r.columns}


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("a", {"tab1.a": ["IDENTITY"]}),
        ("t.a AS x", {"tab1.a": ["IDENTITY"]}),
        ("CAST(a AS STRING) AS x", {"tab1.a": ["TRANSFORMATION"]}),
        ("a + b AS x", {"tab1.a": ["TRANSFORMATION"], "tab1.b": ["TRANSFORMATION"]}),
        ("sum(a) AS x", {"tab1.a": ["AGGREGATION"]}),
        ("count(DISTINCT a) AS x", {"tab1.a": ["AGGREGATION"]}),
        ("sum(a) * 2 AS x", {"tab1.a": ["TRANSFORMATION", "AGGREGATION"]}),
        (
            "max(a + b) AS x",
            {"tab1.a": ["TRANSFORMATION", "AGGREGATION"], "tab1.b": ["TRANSFORMATION", "AGGREGATION"]},
        ),
        (
            "CASE WHEN c > 0 THEN a ELSE b END AS x",
            {"tab1.a": ["TRANSFORMATION"], "tab1.b": ["TRANSFORMATION"], "tab1.c": ["CONDITIONAL"]},
        ),
        ("IF(c IS NULL, a, 0) AS x", {"tab1.a": ["TRANSFORMATION"], "tab1.c": ["CONDITIONAL"]}),
        ("CASE WHEN a > 0 THEN a END AS x", {"tab1.a": ["TRANSFORMATION"]}),
        ("sum(a) OVER (PARTITION BY c) AS x", {"tab1.a": ["AGGREGATION"]}),
    ],
)
def test_direct_subtypes_per_source(expr, expected):
    assert kinds(f"INSERT INTO tab2 SELECT {expr} FROM tab1 t") == {f"tab2.{expr.split()[-1]}": expected}


def test_kinds_pass_through_ctes_subqueries_and_unions():
    got = kinds(
        "WITH c AS (SELECT id, sum(v) AS total, CASE WHEN f THEN w END AS pick FROM tab1 GROUP BY id, f, w) "
        "INSERT INTO tab2 SELECT s.id, s.total, s.pick FROM (SELECT * FROM c) s "
        "UNION ALL SELECT id, amount, pick FROM tab3"
    )
    assert got == {
        "tab2.id": {"tab1.id": ["IDENTITY"], "tab3.id": ["IDENTITY"]},
        "tab2.total": {"tab1.v": ["AGGREGATION"], "tab3.amount": ["AGGREGATION"]},
        "tab2.pick": {
            "tab1.f": ["CONDITIONAL"],
            "tab1.w": ["TRANSFORMATION"],
            "tab3.pick": ["TRANSFORMATION"],
        },
    }


def test_kinds_pass_through_temporary_views():
    got = kinds(
        "CREATE TEMPORARY VIEW v AS SELECT id, upper(name) AS name FROM tab1;"
        "INSERT INTO tab2 SELECT id, name, count(id) AS n FROM v GROUP BY id, name"
    )
    assert got == {
        "tab2.id": {"tab1.id": ["IDENTITY"]},
        "tab2.name": {"tab1.name": ["TRANSFORMATION"]},
        "tab2.n": {"tab1.id": ["AGGREGATION"]},
    }


def test_filter_columns_do_not_change_how_a_value_is_computed():
    got = kinds(
        "WITH c AS (SELECT k, sum(v) AS s FROM tab1 GROUP BY k) "
        "INSERT INTO tab2 SELECT (SELECT c.k FROM c WHERE c.s > 0 LIMIT 1) AS v, "
        "lag(x) OVER (PARTITION BY y ORDER BY z) AS w FROM tab3"
    )
    assert got == {"tab2.v": {"tab1.k": ["TRANSFORMATION"]}, "tab2.w": {"tab3.x": ["TRANSFORMATION"]}}


def test_dependency_kinds_per_clause():
    r, _ = run(
        "INSERT INTO tab2 SELECT a.k, sum(a.v) AS s, row_number() OVER (PARTITION BY b.p ORDER BY b.o) AS rn "
        "FROM tab1 a JOIN tab3 b ON a.id = b.id LEFT JOIN tab4 c USING (uid) "
        "WHERE a.ok GROUP BY a.k, b.p, b.o HAVING max(a.h) > 1 ORDER BY s"
    )
    assert r.dependency_kinds == {
        "tab1.h": ["FILTER"],
        "tab1.id": ["JOIN"],
        "tab1.k": ["GROUP_BY"],
        "tab1.ok": ["FILTER"],
        "tab1.uid": ["JOIN"],
        "tab1.v": ["SORT"],
        "tab3.id": ["JOIN"],
        "tab3.o": ["GROUP_BY", "WINDOW"],
        "tab3.p": ["GROUP_BY", "WINDOW"],
        "tab3.uid": ["JOIN"],
        "tab4.uid": ["JOIN"],
    }
    assert r.target_dependency_refs["tab2"][0] == ("tab1", "h", ["FILTER"])


def test_dependency_kinds_of_merge_update_and_except():
    r, _ = run(
        "MERGE INTO tab2 t USING tab1 s ON t.id = s.id WHEN MATCHED AND s.op = 'u' THEN UPDATE SET v = s.v "
        "WHEN NOT MATCHED THEN INSERT (id, v) VALUES (s.id, s.v)"
    )
    assert r.dependency_kinds == {"tab1.id": ["JOIN"], "tab1.op": ["FILTER"]}
    r, _ = run("UPDATE tab2 SET v = 1 WHERE k IN (SELECT k FROM tab1 WHERE ok)")
    assert r.dependency_kinds == {"tab1.k": ["FILTER"], "tab1.ok": ["FILTER"]}
    r, _ = run("INSERT INTO tab2 SELECT id FROM tab1 EXCEPT SELECT id FROM tab3")
    assert r.dependency_kinds == {"tab3.id": ["FILTER"]}


def _event(sql: str, target: str, **kwargs) -> dict:
    from openlineage.client.serde import Serde

    from sharp_dagster_tests.lineage_runtime.ol_schema import validate_run_event

    lineage = JobLineage.from_script(parse_script(sql, **kwargs), target, sql=sql)
    event = build_run_event(
        "START",
        job_name="j",
        run_id="01929f3c-5b9a-7c3e-8f00-000000000001",
        namespace="n",
        warehouse_uri="file:///w",
        lineage=lineage,
    )
    out = json.loads(Serde.to_json(event))
    validate_run_event(out)
    return out


def test_openlineage_facet_carries_the_transformation_types():
    event = _event(
        "INSERT INTO dwd.t SELECT o.id, sum(o.amt) AS amt, CASE WHEN o.vip THEN 'v' END AS tier "
        "FROM ods.o o JOIN ods.u u ON u.id = o.uid WHERE o.ok GROUP BY o.id, o.vip",
        "dwd.t",
    )
    facet = event["outputs"][0]["facets"]["columnLineage"]

    def types(entry: dict) -> list[tuple[str, str]]:
        return [(t["type"], t["subtype"]) for t in entry["transformations"]]

    fields = {c: {f["field"]: types(f) for f in v["inputFields"]} for c, v in facet["fields"].items()}
    assert fields == {
        "id": {"id": [("DIRECT", "IDENTITY")]},
        "amt": {"amt": [("DIRECT", "AGGREGATION")]},
        "tier": {"vip": [("INDIRECT", "CONDITIONAL")]},
    }
    dataset = {f"{d['name']}.{d['field']}": types(d) for d in facet["dataset"]}
    assert dataset == {
        "ods.o.id": [("INDIRECT", "GROUP_BY")],
        "ods.o.ok": [("INDIRECT", "FILTER")],
        "ods.o.uid": [("INDIRECT", "JOIN")],
        "ods.o.vip": [("INDIRECT", "GROUP_BY")],
        "ods.u.id": [("INDIRECT", "JOIN")],
    }


def test_openlineage_path_datasets_are_files():
    sql = "INSERT OVERWRITE DIRECTORY '/out/x' USING parquet SELECT f.id FROM parquet.`/in/y.v2` f WHERE f.k = 1"
    event = _event(sql, "parquet./out/x")
    assert [(i["namespace"], i["name"]) for i in event["inputs"]] == [("file", "/in/y.v2")]
    out = event["outputs"][0]
    assert (out["namespace"], out["name"]) == ("file", "/out/x")
    (src,) = out["facets"]["columnLineage"]["fields"]["id"]["inputFields"]
    assert (src["namespace"], src["name"], src["field"]) == ("file", "/in/y.v2", "id")


# ---- names holding a dot through the project graph (issue 30) ---------------------------------------------------


def test_alias_holding_a_dot_gives_a_column_edge_not_a_key_error():
    catalog = make_catalog(
        dwd__detail="SELECT order_id AS `order.id`, amount AS `a.b.c` FROM ods.orders WHERE amount > 0"
    )
    results = project_lineage(catalog)
    (col, *_) = results["dwd.detail"].columns
    assert (col.table, col.column, col.refs) == ("dwd.detail", "order.id", [("ods.orders", "order_id")])
    graph = build_project_graph(catalog, results)
    # Transitively back to the MySQL source, through the raw binlog table.
    for col, src in (("order.id", "order_id"), ("a.b.c", "amount")):
        assert graph.column_sources("dwd.detail", col) == [
            ("mysql:shop.orders", src),
            ("ods.orders", src),
            ("src.orders_changes", src),
        ]


def test_lineage_cli_check_and_graph_with_a_dotted_alias(monkeypatch, tmp_path: Path, capsys):
    from sharp_dagster.cli import lineage as lineage_cli

    from .util import run_direct

    catalog = make_catalog(dwd__detail="SELECT order_id AS `o.id`, amount FROM ods.orders")
    monkeypatch.setattr(lineage_cli, "_load_catalog", lambda: catalog)
    assert run_direct(["lineage", "check"]) == 0
    assert run_direct(["lineage", "graph", "dwd.detail", "--columns"]) == 0
    assert "o.id" in capsys.readouterr().out


def test_path_datasets_round_trip_through_the_graph():
    from sharp_dagster.lineage.graph import Dataset, LineageGraph, split_qualified

    r = parse_script("INSERT OVERWRITE DIRECTORY '/out/v1.2' USING csv SELECT id FROM parquet.`s3a://b/in.x`")
    src, dst = r.sources[0], r.targets[0]
    assert split_qualified(src) == ("spark", "parquet", "s3a://b/in.x")
    assert split_qualified(dst) == ("spark", "csv", "/out/v1.2")
    datasets = [Dataset.from_qualified(n) for n in (src, dst)]
    assert [d.qualified for d in datasets] == [src, dst]
    (col,) = r.columns
    graph = LineageGraph(
        datasets,
        [(datasets[0].urn, datasets[1].urn)],
        [((datasets[0].urn, s), (datasets[1].urn, col.column)) for _, s in col.refs],
    )
    assert graph.upstream(dst) == [datasets[0].urn]
    assert graph.column_sources(dst, "id") == [(src, "id")]


def test_project_job_lineage_carries_the_kinds_of_the_demo_sql(monkeypatch):
    from sharp_dagster.warehouse.catalog_lineage import job_lineage

    monkeypatch.delenv("SHARP_WAREHOUSE_SQL_DIR", raising=False)
    detail = job_lineage("dwd/order_detail")
    assert detail.transformations["item_id"] == {"ods.order_item.item_id": ["IDENTITY"]}
    assert detail.transformations["line_amount"] == {
        "ods.order_item.quantity": ["TRANSFORMATION"],
        "ods.order_item.unit_price": ["TRANSFORMATION"],
    }
    assert detail.dependency_kinds["ods.orders.order_time"] == ["FILTER"]
    assert detail.dependency_kinds["ods.product.product_id"] == ["JOIN"]
    gmv = job_lineage("ads/gmv_by_category")
    assert gmv.transformations["order_count"] == {"dwd.order_detail.order_id": ["AGGREGATION"]}
    # The CDC path copies values: identity.
    assert job_lineage("ods/user_info").transformations == {
        "source_table": {"original_binlog.shop.source_table": ["IDENTITY"]}
    }


def test_asset_metadata_keeps_a_dotted_column():
    from sharp_dagster.assets.lineage_meta import column_lineage, column_lineage_markdown

    r = parse_script("SELECT o.id AS `o.id`, o.amt FROM ods.orders o", default_target="dwd.t")
    deps = column_lineage(r, "dwd.t").deps_by_column
    assert {c: [(d.asset_key.path, d.column_name) for d in v] for c, v in deps.items()} == {
        "o.id": [(["ods", "orders"], "id")],
        "amt": [(["ods", "orders"], "amt")],
    }
    assert "| `o.id` | `ods.orders.id` |" in column_lineage_markdown(r, "dwd.t").splitlines()
