"""What the Dagster UI shows of lineage: the column lineage as a Markdown table and the link to the explorer."""

from __future__ import annotations

import pytest
from dagster import AssetKey, MetadataValue

from sharp_dagster.assets.lineage_meta import (
    EXPLORER_URL_KEY,
    LINEAGE_TABLE_KEY,
    column_lineage_markdown,
    lineage_metadata,
)
from sharp_dagster.lineage.explorer.links import DEFAULT_PORT, table_path, table_url
from sharp_dagster.lineage.parser import parse_script


@pytest.fixture(scope="module")
def gmv_lineage():
    from sharp_dagster.warehouse.catalog import load_catalog
    from sharp_dagster.warehouse.catalog_lineage import project_lineage

    return project_lineage(load_catalog())["ads.gmv_by_category"]


def test_markdown_table_of_a_demo_asset(gmv_lineage, monkeypatch):
    monkeypatch.delenv("SHARP_LINEAGE_URL", raising=False)
    meta = lineage_metadata(gmv_lineage, "ads.gmv_by_category")
    md = meta[LINEAGE_TABLE_KEY]
    assert isinstance(md, type(MetadataValue.md("")))
    lines = md.value.splitlines()
    assert "| column | computed from |" in lines
    assert "| `gmv` | `dwd.order_detail.line_amount` |" in lines
    assert "| `category` | `dwd.order_detail.category` |" in lines
    assert "| `item_count` | `dwd.order_detail.quantity` |" in lines
    # One row per output column, no more.
    assert sum(1 for line in lines if line.startswith("| `")) == len(
        {c.target for c in gmv_lineage.columns if c.target.startswith("ads.gmv_by_category.")}
    )
    url = meta[EXPLORER_URL_KEY]
    assert url.value == f"http://127.0.0.1:{DEFAULT_PORT}/table/ads/gmv_by_category"
    deps = meta["dagster/column_lineage"].deps_by_column["gmv"]
    assert [(d.asset_key, d.column_name) for d in deps] == [
        (AssetKey(["dwd", "order_detail"]), "line_amount")
    ]


def test_base_url_from_the_environment(monkeypatch):
    monkeypatch.setenv("SHARP_LINEAGE_URL", "https://lineage.example.test/explorer/")
    assert table_url("ads.gmv_daily") == "https://lineage.example.test/explorer/table/ads/gmv_daily"
    monkeypatch.setenv("SHARP_LINEAGE_URL", "lineage.example.test")
    with pytest.raises(ValueError, match="SHARP_LINEAGE_URL"):
        table_url("ads.gmv_daily")
    assert table_path("mysql:shop.orders") == "/table/mysql:shop/orders"
    assert table_path("ads/gmv_daily") == "/table/ads/gmv_daily"


def test_markdown_escapes_and_dependencies():
    sql = (
        "INSERT OVERWRITE TABLE ads.t SELECT a.x AS `odd|name`, 1 AS one FROM dwd.a a "
        "JOIN dwd.b b ON a.k = b.k WHERE b.flag = 1"
    )
    lineage = parse_script(sql, dialect="spark")
    md = column_lineage_markdown(lineage, "ads.t")
    assert "| `odd\\|name` | `dwd.a.x` |" in md.splitlines()
    assert "| `one` | (a constant or no column) |" in md.splitlines()
    last = md.splitlines()[-1]
    assert last.startswith("Rows filtered, joined, grouped or ordered by:")
    assert "`dwd.b.flag`" in last and "`dwd.a.k`" in last


def test_every_asset_links_to_its_page(project_server, monkeypatch):
    """Every asset of the code location carries its explorer URL, and that page's table is in the graph."""
    from urllib.parse import quote, urlsplit

    from sharp_dagster.definitions import defs
    from sharp_dagster_tests.lineage_explorer.conftest import get

    graph = defs.resolve_asset_graph()
    meta = graph.get(AssetKey(["ads", "gmv_by_category"])).metadata
    assert "| `gmv` | `dwd.order_detail.line_amount` |" in meta[LINEAGE_TABLE_KEY].value
    keys = list(graph.get_all_asset_keys())
    assert len(keys) >= 10
    for key in keys:
        url = graph.get(key).metadata[EXPLORER_URL_KEY].value
        path = urlsplit(url).path
        assert path.startswith("/table/"), (key, url)
        table = path[len("/table/") :]
        status, body, _ = get(f"{project_server.url}/api/table?table={quote(table)}")
        assert status == 200, (key, url, body)
        assert body["table"]["path"] == path  # the page links back to itself
