"""Source table declarations in the CDC config: columns (MySQL type -> Spark type), shards, and their errors."""

from __future__ import annotations

import pytest

from sharp_dagster.cdc.source.columns import ColumnTypeError, parse_column, spark_type_of
from sharp_dagster.cdc.source.config import ConfigError, load_source_config
from sharp_dagster.settings import WAREHOUSE_SQL_DIR

SAMPLE = """
source_id: shop-mariadb
databases:
  - name: shop
    tables:
      - name: user_info
        shard_regex: 'user_info_(\\d+)'
        shards: 3
        primary_key: [user_id]
        columns:
          - user_id BIGINT NOT NULL
          - user_name VARCHAR(64) NOT NULL
          - seen DATETIME
      - name: product
        primary_key: [product_id]
        columns:
          - product_id BIGINT NOT NULL
          - price DECIMAL(10,2)
"""


def load(tmp_path, text: str):
    path = tmp_path / "shop.yaml"
    path.write_text(text)
    return path, load_source_config(path)


def test_columns_and_shards_are_declared(tmp_path):
    _, cfg = load(tmp_path, SAMPLE)
    users, product = cfg.database("shop").tables
    assert users.shards == ("user_info_0", "user_info_1", "user_info_2")
    assert users.spark_schema == {"user_id": "bigint", "user_name": "string", "seen": "timestamp"}
    assert [c.mysql_type for c in users.columns] == ["BIGINT NOT NULL", "VARCHAR(64) NOT NULL", "DATETIME"]
    assert product.shards == ("product",) and product.spark_schema["price"] == "decimal(10,2)"
    assert product.mysql_ddl("product") == (
        "CREATE TABLE `product` (\n  `product_id` BIGINT NOT NULL,\n  `price` DECIMAL(10,2),\n"
        "  PRIMARY KEY (`product_id`)\n)"
    )
    named = SAMPLE.replace("shards: 3", "shards: [user_info_7, user_info_12]")
    _, cfg = load(tmp_path, named)
    assert cfg.database("shop").table("user_info").shards == ("user_info_7", "user_info_12")
    _, cfg = load(tmp_path, SAMPLE.replace("shards: 3", "shards: 0000..1023"))
    padded = cfg.database("shop").table("user_info").shards  # a zero-padded range, as cdc init writes it
    assert len(padded) == 1024 and padded[:2] == ("user_info_0000", "user_info_0001")
    assert padded[-1] == "user_info_1023"


def test_a_table_is_premerged_only_when_its_entry_says_so(tmp_path):
    _, cfg = load(
        tmp_path, SAMPLE.replace("      - name: product\n", "      - name: product\n        premerge: true\n")
    )
    assert [t.premerge for t in cfg.database("shop").tables] == [False, True]
    with pytest.raises(ConfigError, match=r"databases\[0\]\.tables\[1\]\.premerge"):
        load(
            tmp_path,
            SAMPLE.replace("      - name: product\n", "      - name: product\n        premerge: often\n"),
        )


def test_columns_and_shards_stay_optional_for_the_engine(tmp_path):
    text = "source_id: s\ndatabases:\n  - name: db\n    tables:\n      - {name: t, shard_regex: 't_(\\d+)', primary_key: [id]}\n"
    _, cfg = load(tmp_path, text)
    table = cfg.database("db").table("t")
    assert (table.columns, table.shards, table.spark_schema) == ((), (), {})


def test_the_projects_shop_declares_every_table_fully():
    cfg = load_source_config(WAREHOUSE_SQL_DIR / "cdc" / "shop.yaml")
    tables = cfg.database("shop").tables
    assert [t.name for t in tables] == ["user_info", "product", "orders", "order_item"]
    assert all(t.columns and t.shards for t in tables)
    assert cfg.database("shop").table("user_info").shards == tuple(f"user_info_{i}" for i in range(4))
    assert cfg.database("shop").table("order_item").spark_schema["quantity"] == "int"


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        (
            ("- seen DATETIME", "- seen FLOAT"),
            "databases[0].tables[0].columns[2]",
            "table shop.user_info: MySQL type 'FLOAT' has no exact Spark type",
        ),
        (
            ("- seen DATETIME", "- seen BIGINT UNSIGNED"),
            "databases[0].tables[0].columns[2]",
            "table shop.user_info: MySQL type 'BIGINT UNSIGNED': unsigned integers",
        ),
        (
            ("- price DECIMAL(10,2)", "- price DECIMAL(10)"),
            "databases[0].tables[1].columns[1]",
            "table shop.product: MySQL type 'DECIMAL(10)': give both precision and scale",
        ),
        (
            ("- seen DATETIME", "- seen"),
            "databases[0].tables[0].columns[2]",
            "table shop.user_info: expected '<column name> <MySQL type>', got 'seen'",
        ),
        (
            ("- seen DATETIME", "- USER_ID INT"),
            "databases[0].tables[0].columns[2]",
            "table shop.user_info: column 'USER_ID' is declared twice",
        ),
        (
            ("- seen DATETIME", "- source_table VARCHAR(64)"),
            "databases[0].tables[0].columns[2]",
            "table shop.user_info is sharded",
        ),
        (
            ("- seen DATETIME", "- {seen: DATETIME}"),
            "databases[0].tables[0].columns[2]",
            "table shop.user_info: expected '<name> <MySQL type>'",
        ),
        (
            ("primary_key: [product_id]", "primary_key: [id]"),
            "databases[0].tables[1].primary_key",
            "table shop.product: ['id'] not among the declared columns",
        ),
        (
            ("primary_key: [product_id]", "primary_key: [product_id]\n        shards: 2"),
            "databases[0].tables[1].shards",
            "table shop.product has no shard_regex",
        ),
        (
            ("shards: 3", "shards: [user_info_1, user_info_1_bak]"),
            "databases[0].tables[0].shards",
            "table shop.user_info: user_info_1_bak do(es) not match shard_regex",
        ),
        (
            ("shards: 3", "shards: [user_info_1, user_info_1]"),
            "databases[0].tables[0].shards",
            "table shop.user_info: a physical table is listed twice",
        ),
        (
            ("shards: 3", "shards: 0"),
            "databases[0].tables[0].shards",
            "table shop.user_info: a shard count is from 1",
        ),
        (
            ("shards: 3", "shards: three"),
            "databases[0].tables[0].shards",
            "table shop.user_info: expected a shard count, a range of zero-padded numbers",
        ),
        (
            ("shards: 3", "shards: 0..0002"),
            "databases[0].tables[0].shards",
            "table shop.user_info: a shard range is '<first>..<last>' with as many digits on both sides",
        ),
        (
            ("shards: 3", "shards: 0002..0000"),
            "databases[0].tables[0].shards",
            "first <= last",
        ),
        (
            ("'user_info_(\\d+)'", "'ui_(\\d+)'"),
            "databases[0].tables[0].shards",
            "table shop.user_info: user_info_0, user_info_1, user_info_2 do(es) not match shard_regex",
        ),
        (
            ("          - product_id BIGINT NOT NULL\n          - price DECIMAL(10,2)\n", "          []\n"),
            "databases[0].tables[1].columns",
            "table shop.product: expected a non-empty list",
        ),
    ],
)
def test_bad_declarations_name_the_file_the_field_and_the_table(tmp_path, change, field, message):
    assert change[0] in SAMPLE
    with pytest.raises(ConfigError) as err:
        load(tmp_path, SAMPLE.replace(*change))
    assert str(err.value).startswith(f"{tmp_path / 'shop.yaml'}: {field}: "), str(err.value)
    assert message in str(err.value)


@pytest.mark.parametrize(
    ("mysql", "spark"),
    [
        ("SMALLINT", "smallint"),
        ("INT(11) NOT NULL", "int"),
        ("integer", "int"),
        ("BIGINT AUTO_INCREMENT", "bigint"),
        ("DECIMAL(38,0)", "decimal(38,0)"),
        ("NUMERIC(12, 2) DEFAULT 0", "decimal(12,2)"),
        ("DOUBLE", "double"),
        ("CHAR(2)", "string"),
        ("VARCHAR(16) DEFAULT 'n/a' NOT NULL", "string"),
        ("TEXT", "string"),
        ("DATE", "date"),
        ("DATETIME(6)", "timestamp"),
        ("TIMESTAMP NULL", "timestamp"),
    ],
)
def test_the_one_type_mapping(mysql, spark):
    assert spark_type_of(mysql) == spark


@pytest.mark.parametrize(
    "mysql",
    ["TINYINT", "FLOAT", "INT UNSIGNED", "DECIMAL(40,2)", "DECIMAL(5,6)", "VARCHAR", "TEXT(9)", "DATETIME(7)"]
    + ["INT COMMENT 'x'", "VARCHAR(3,1)", "JSON"],
)
def test_types_without_an_exact_spark_type_are_refused(mysql):
    with pytest.raises(ColumnTypeError, match="MySQL type"):
        spark_type_of(mysql)


def test_a_declaration_is_a_name_then_a_type():
    column = parse_column("  order_time DATETIME NOT NULL ")
    assert (column.name, column.mysql_type, column.spark_type) == (
        "order_time",
        "DATETIME NOT NULL",
        "timestamp",
    )
    with pytest.raises(ColumnTypeError, match="expected '<column name> <MySQL type>'"):
        parse_column("1st INT")


def test_start_is_the_first_merged_day(tmp_path):
    from sharp_dagster.warehouse.cdc_layout import START, OdsTable, bootstrap_day, source_start

    _, cfg = load(tmp_path, SAMPLE)
    assert cfg.start is None and source_start(cfg) == START  # the demo's sources start with the warehouse
    for written in ("start: 2026-11-26", "start: '2026-11-26'"):
        _, cfg = load(tmp_path, f"{written}\n{SAMPLE}")
        table = OdsTable("shop", cfg.databases[0].tables[0], cfg)
        assert (cfg.start, table.start, bootstrap_day(table.start)) == (
            "2026-11-26",
            "2026-11-26",
            "2026-11-25",
        )
        assert cfg.only(["shop"]).start == "2026-11-26"
    with pytest.raises(ConfigError, match=r"shop.yaml: not valid YAML: month must be in 1..12"):
        load(tmp_path, f"start: 2026-13-01\n{SAMPLE}")
    for bad in ("start: '2026-13-01'", "start: yesterday", "start: 2026-11-26T00:00:00"):
        with pytest.raises(ConfigError, match=r"shop.yaml: start: expected a day YYYY-MM-DD, got"):
            load(tmp_path, f"{bad}\n{SAMPLE}")
