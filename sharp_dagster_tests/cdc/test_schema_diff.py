"""What a staged ODS day changed in its columns, by Iceberg field id (`cdc/ods/schema_diff.py`), and the source's
`schema_check:` setting that says whether such a change holds the day (strong) or alerts (weak)."""

from __future__ import annotations

import pytest

from sharp_dagster.cdc.ods.schema_diff import Field, SchemaChange, diff
from sharp_dagster.cdc.source.config import ConfigError, load_source_config

BEFORE = {
    1: Field(1, "order_id", "long"),
    2: Field(2, "order_status", "string"),
    3: Field(3, "qty", "int"),
    4: Field(4, "note", "string"),
    5: Field(5, "price", "decimal(10, 2)"),
}


def test_same_id_other_name_is_a_rename_other_type_a_retype_a_missing_id_a_drop():
    after = {
        1: Field(1, "order_id", "long"),
        2: Field(2, "status", "string"),  # renamed
        3: Field(3, "qty", "long"),  # int -> bigint
        5: Field(5, "unit_price", "decimal(12, 2)"),  # renamed and widened: one change
        6: Field(6, "note", "string"),  # a new column under an old name: the old one was dropped
    }
    assert diff(BEFORE, after) == [
        SchemaChange("rename", "order_status", 2, "string", "status", "string"),
        SchemaChange("retype", "qty", 3, "int", "qty", "long"),
        SchemaChange("drop", "note", 4, "string"),
        SchemaChange("rename", "price", 5, "decimal(10, 2)", "unit_price", "decimal(12, 2)"),
    ]
    assert [c.describe() for c in diff(BEFORE, after)] == [
        "order_status renamed to status",
        "qty retyped int -> long",
        "note dropped",
        "price renamed to unit_price and retyped decimal(10, 2) -> decimal(12, 2)",
    ]
    assert diff(BEFORE, {**BEFORE, 7: Field(7, "added", "int")}) == [], "an added column breaks no reader"


YAML = """
source_id: shop-mariadb
{setting}databases:
  - name: shop
    tables:
      - name: orders
        primary_key: [order_id]
"""


def test_the_sources_schema_check_setting(tmp_path):
    path = tmp_path / "shop.yaml"
    path.write_text(YAML.format(setting=""))
    assert load_source_config(path).schema_check == "strong", "safe by default: the day is held"
    path.write_text(YAML.format(setting="schema_check: weak\n"))
    assert load_source_config(path).schema_check == "weak"
    assert load_source_config(path).only(["shop"]).schema_check == "weak"
    path.write_text(YAML.format(setting="schema_check: hard\n"))
    with pytest.raises(
        ConfigError, match=r"shop.yaml: schema_check: expected one of strong, weak, got 'hard'"
    ):
        load_source_config(path)
