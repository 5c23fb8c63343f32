"""The warehouse's source tables come from the CDC declarations (`warehouse/cdc/*.yaml`), nothing else."""

from __future__ import annotations

import pytest

from sharp_dagster.cdc.source.config import ConfigError
from sharp_dagster.settings import WAREHOUSE_SQL_DIR
from sharp_dagster.warehouse import sources


def _warehouse(tmp_path, monkeypatch, yaml_text: str):
    (tmp_path / "cdc").mkdir()
    path = tmp_path / "cdc" / "shop.yaml"
    path.write_text(yaml_text)
    monkeypatch.setenv("SHARP_WAREHOUSE_SQL_DIR", str(tmp_path))
    return path


def test_schemas_shards_and_edges_follow_the_declaration(tmp_path, monkeypatch):
    text = (WAREHOUSE_SQL_DIR / "cdc" / "shop.yaml").read_text()
    changed = text.replace("shards: 4", "shards: [user_info_a1, user_info_b2]").replace(
        "shard_regex: 'user_info_(\\d+)'", "shard_regex: 'user_info_\\w\\d'"
    )
    changed = changed.replace("- price DECIMAL(10,2)", "- price DECIMAL(10,2)\n          - weight DOUBLE")
    assert changed.count("user_info_a1") == 1 and "weight DOUBLE" in changed
    _warehouse(tmp_path, monkeypatch, changed)
    schemas = sources.external_schemas()
    assert (
        schemas["ods.product"]["weight"] == "double" and schemas["mysql:shop.product"]["weight"] == "double"
    )
    assert (
        schemas["ods.user_info"]["source_table"] == "string" and "source_table" not in schemas["ods.orders"]
    )
    assert sorted(k for k in schemas if k.startswith("mysql:shop.user_info")) == [
        "mysql:shop.user_info_a1",
        "mysql:shop.user_info_b2",
    ]
    assert "original_binlog.shop" in schemas
    assert sources.physical_tables("shop")["user_info"] == ["user_info_a1", "user_info_b2"]
    assert sources.physical_tables("other") == {}
    assert ("mysql:shop.user_info_b2", "original_binlog.shop") in sources.source_edges()
    assert sources.other_assets()["original_binlog.shop"] == "hourly"


NO_COLUMNS = """
source_id: s
databases:
  - name: shop
    tables:
      - name: orders
        primary_key: [order_id]
"""
NO_SHARDS = """
source_id: s
databases:
  - name: shop
    tables:
      - name: user_info
        shard_regex: 'user_info_(\\d+)'
        primary_key: [user_id]
        columns: [user_id BIGINT NOT NULL]
"""


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (NO_COLUMNS, "table shop.orders declares no columns"),
        (NO_SHARDS, "table shop.user_info is sharded but declares no shards"),
    ],
)
def test_the_warehouse_needs_columns_and_shards_and_says_where(tmp_path, monkeypatch, text, message):
    path = _warehouse(tmp_path, monkeypatch, text)
    with pytest.raises(ConfigError) as err:
        sources.external_schemas()
    assert str(err.value).startswith(f"{path}: ") and message in str(err.value)
